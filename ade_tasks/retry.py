"""Retry policy as plain data: how many retries, how long between them, and a loop that obeys it.

Only `TransientError` is retried; anything else means the same call would fail the same way.
A transient error may carry `retry_after` (seconds a server asked us to wait), which wins over
the backoff when it is longer (`retry_after_seconds` reads it from an HTTP answer).

`Backoff` is the other shape of waiting: not retries inside one call, but how long a periodic
job (the GitHub poller, the relay drain) leaves a failing service alone after consecutive
failed rounds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

from ade_tasks.errors import TransientError

T = TypeVar("T")

MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class RetryPolicy:
    """Retries after the first try, with exponential backoff capped at `max_delay` seconds."""

    attempts: int = 0
    initial_delay: float = 0.4
    factor: float = 2.0
    max_delay: float = 60.0

    def __post_init__(self) -> None:
        # ValueError rather than an AdeError so a pydantic model embedding these fields reports
        # it as an ordinary validation error of the field.
        if not 0 <= self.attempts <= MAX_ATTEMPTS:
            raise ValueError(
                f"retry attempts must be between 0 and {MAX_ATTEMPTS}, got {self.attempts}"
            )
        if not (math.isfinite(self.initial_delay) and self.initial_delay >= 0):
            raise ValueError(f"retry initial_delay must be >= 0 seconds, got {self.initial_delay}")
        if not (math.isfinite(self.factor) and self.factor >= 1):
            raise ValueError(f"retry factor must be >= 1, got {self.factor}")
        if not (math.isfinite(self.max_delay) and self.max_delay >= 0):
            raise ValueError(f"retry max_delay must be >= 0 seconds, got {self.max_delay}")

    @property
    def max_tries(self) -> int:
        """The first try plus every retry."""
        return 1 + self.attempts

    def delay_for(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `attempt` (1 = the first retry)."""
        if attempt < 1:
            raise ValueError(f"retry attempt numbers start at 1, got {attempt}")
        try:
            backoff = self.initial_delay * self.factor ** (attempt - 1)
        except OverflowError:
            backoff = self.max_delay
        if retry_after is not None and retry_after > backoff:
            backoff = retry_after
        return min(backoff, self.max_delay)

    def run(
        self,
        call: Callable[[], T],
        *,
        deadline: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        on_retry: Callable[[int, TransientError, float], None] | None = None,
    ) -> T:
        """Call `call` until it returns, retrying `TransientError`; re-raise the last error.

        `deadline` is a `clock()` (monotonic) instant: no retry starts whose wait would end
        after it. `on_retry(attempt, error, delay)` runs before each wait, for logging.
        """
        attempt = 0
        while True:
            try:
                return call()
            except TransientError as exc:
                attempt += 1
                if attempt > self.attempts:
                    raise
                delay = self.delay_for(attempt, retry_after_of(exc))
                if deadline is not None and clock() + delay > deadline:
                    raise
                if on_retry is not None:
                    on_retry(attempt, exc, delay)
                sleep(delay)


def retry_after_of(exc: Exception) -> float | None:
    """The seconds `exc` says a server asked us to wait, if it says (and says it sanely)."""
    value = getattr(exc, "retry_after", None)
    # bool is an int; a stray True must not read as "one second".
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return max(float(value), 0.0)
    return None


def retry_after_seconds(header: str | None, now: datetime | None = None) -> float | None:
    """An HTTP `Retry-After` value (seconds or an HTTP date) as seconds from `now`; None if absent
    or unreadable."""
    if header is None or not header.strip():
        return None
    text = header.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        # RFC 9110 dates are GMT; parsedate_to_datetime leaves "-0000" naive.
        when = when.replace(tzinfo=UTC)
    current = now or datetime.now(UTC)
    return max((when - current).total_seconds(), 0.0)


@dataclass(frozen=True)
class Backoff:
    """How long a periodic job leaves a service alone after consecutive failed rounds:
    `initial` seconds, times `factor` per further failure, at most `maximum`; never less than
    a server's Retry-After or rate-limit reset (believed up to `server_maximum`, past which the
    header is taken as bogus)."""

    initial: float = 30.0
    factor: float = 2.0
    maximum: float = 15 * 60.0
    # GitHub's primary rate limit resets hourly; a little slack covers clock skew.
    server_maximum: float = 65 * 60.0

    def __post_init__(self) -> None:
        for name in ("initial", "maximum", "server_maximum"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"backoff {name} must be >= 0 seconds, got {value}")
        if not (math.isfinite(self.factor) and self.factor >= 1):
            raise ValueError(f"backoff factor must be >= 1, got {self.factor}")

    def delay_for(self, failures: int, retry_after: float | None = None) -> float:
        """Seconds to wait after `failures` failed rounds in a row (1 = the first failure)."""
        if failures < 1:
            raise ValueError(f"failure counts start at 1, got {failures}")
        # The exponent is bounded so a job that failed for days never overflows a float.
        delay = min(self.initial * self.factor ** min(failures - 1, 64), self.maximum)
        if retry_after is not None and math.isfinite(retry_after) and retry_after > delay:
            delay = min(retry_after, self.server_maximum)
        return delay
