"""RetryPolicy: backoff arithmetic and the retry loop, with a fake clock instead of sleeping."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ade_tasks.errors import AdeError, TransientError
from ade_tasks.retry import RetryPolicy


class FakeClock:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


class Flaky(TransientError):
    """A transient error that may carry a server's Retry-After."""

    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("flaky")
        self.retry_after = retry_after


def failing(errors: list[Exception], result: str = "done") -> tuple[Callable[[], str], list[int]]:
    """A call that raises `errors` in order, then returns `result`; and its call log."""
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result

    return call, calls


def test_delays_double_from_the_initial_delay() -> None:
    policy = RetryPolicy(attempts=5)
    assert [policy.delay_for(n) for n in range(1, 6)] == pytest.approx([0.4, 0.8, 1.6, 3.2, 6.4])


def test_delay_is_capped_at_max_delay() -> None:
    policy = RetryPolicy(attempts=5, initial_delay=10, factor=3, max_delay=60)
    assert policy.delay_for(3) == 60
    assert policy.delay_for(10_000) == 60


def test_longer_retry_after_wins_but_is_capped() -> None:
    policy = RetryPolicy(attempts=3, max_delay=30)
    assert policy.delay_for(1, retry_after=5) == 5
    assert policy.delay_for(1, retry_after=3600) == 30


def test_shorter_retry_after_does_not_shorten_the_backoff() -> None:
    assert RetryPolicy(attempts=3).delay_for(3, retry_after=0.1) == pytest.approx(1.6)


@pytest.mark.parametrize(
    "kwargs",
    [{"attempts": -1}, {"attempts": 6}, {"initial_delay": -1}, {"factor": 0.5}, {"max_delay": -1}],
)
def test_invalid_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="retry"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_attempt_numbers_start_at_one() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        RetryPolicy(attempts=1).delay_for(0)


def test_success_on_first_try_never_sleeps() -> None:
    clock = FakeClock()
    call, calls = failing([])
    assert RetryPolicy(attempts=3).run(call, sleep=clock.sleep, clock=clock) == "done"
    assert len(calls) == 1 and clock.sleeps == []


def test_transient_errors_are_retried_with_backoff() -> None:
    # Given a call that fails twice with a transient error
    clock = FakeClock()
    call, calls = failing([Flaky(), Flaky()])
    # When it runs under three retries
    result = RetryPolicy(attempts=3).run(call, sleep=clock.sleep, clock=clock)
    # Then the third try succeeds after the first two backoff delays
    assert result == "done"
    assert len(calls) == 3
    assert clock.sleeps == pytest.approx([0.4, 0.8])


def test_last_error_is_reraised_when_retries_run_out() -> None:
    clock = FakeClock()
    last = Flaky()
    call, calls = failing([Flaky(), Flaky(), last])
    with pytest.raises(Flaky) as caught:
        RetryPolicy(attempts=2).run(call, sleep=clock.sleep, clock=clock)
    assert caught.value is last
    assert len(calls) == 3
    assert clock.sleeps == pytest.approx([0.4, 0.8])


def test_zero_attempts_means_a_single_try() -> None:
    clock = FakeClock()
    call, calls = failing([Flaky()])
    with pytest.raises(Flaky):
        RetryPolicy().run(call, sleep=clock.sleep, clock=clock)
    assert len(calls) == 1 and clock.sleeps == []


@pytest.mark.parametrize("error", [AdeError("permanent"), ValueError("bug")])
def test_non_transient_errors_are_not_retried(error: Exception) -> None:
    clock = FakeClock()
    call, calls = failing([error])
    with pytest.raises(type(error)):
        RetryPolicy(attempts=5).run(call, sleep=clock.sleep, clock=clock)
    assert len(calls) == 1 and clock.sleeps == []


def test_retry_after_on_the_error_sets_the_wait() -> None:
    clock = FakeClock()
    call, _ = failing([Flaky(retry_after=2.5)])
    RetryPolicy(attempts=1).run(call, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == [2.5]


def test_non_numeric_retry_after_is_ignored() -> None:
    clock = FakeClock()
    call, _ = failing([Flaky(retry_after=True)])  # a bool is not a number of seconds
    RetryPolicy(attempts=1).run(call, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == pytest.approx([0.4])


def test_stops_early_when_the_next_wait_would_pass_the_deadline() -> None:
    # Given a deadline 1 s away and a call that always fails
    clock = FakeClock()
    call, calls = failing([Flaky() for _ in range(6)])
    # When it runs under five retries (0.4 + 0.8 would reach 1.2 s)
    with pytest.raises(Flaky):
        RetryPolicy(attempts=5).run(call, sleep=clock.sleep, clock=clock, deadline=clock.now + 1)
    # Then it gives up after the retry that still fits
    assert clock.sleeps == pytest.approx([0.4])
    assert len(calls) == 2


def test_on_retry_sees_each_retry_before_its_wait() -> None:
    clock = FakeClock()
    seen: list[tuple[int, float]] = []
    call, _ = failing([Flaky(), Flaky()])
    RetryPolicy(attempts=2).run(
        call, sleep=clock.sleep, clock=clock, on_retry=lambda n, _exc, d: seen.append((n, d))
    )
    assert seen == [(1, pytest.approx(0.4)), (2, pytest.approx(0.8))]


def test_max_tries_counts_the_first_try() -> None:
    assert RetryPolicy(attempts=3).max_tries == 4
