"""What `make bench` (bench/dispatch.py) computes from its measurements: throughput over all of a
side's bursts and round by round, and the latency floor it prints (raw Celery's `true` task plus
the two durable commits an ADE run makes before its step), which tells how much of the p50 ratio
the commits alone take on the machine, so it must add up and say whether the target is within
reach."""

from __future__ import annotations

import pytest

from bench.dispatch import CommitProbe, Result, p50_floor, parse_args, report


def _result(label: str, p50_ms: float, rate: float = 100.0) -> Result:
    return Result(label, "tasks", bursts=[(int(rate), 1.0)], latencies=[p50_ms / 1000] * 5)


def test_throughput_is_all_bursts_items_over_their_time_and_each_round_is_kept() -> None:
    result = Result("ade", "runs", bursts=[(300, 1.0), (300, 2.0), (300, 3.0)])

    assert result.rate == pytest.approx(900 / 6.0)
    assert result.round_rates == pytest.approx([300.0, 150.0, 100.0])


def test_the_report_gives_the_throughput_ratio_of_each_round_beside_the_pooled_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    noop = _result("noop", 1.0, 500.0)
    true = Result("true", "tasks", bursts=[(300, 1.0), (300, 1.0)], latencies=[0.002] * 3)
    durable = Result("durable", "tasks", bursts=[(100, 1.0)] * 2, latencies=[0.008] * 3)
    ade = Result("ade", "runs", bursts=[(300, 2.5), (300, 1.5)], latencies=[0.004] * 3)
    commits = CommitProbe(after_idle=[0.0003] * 3, back_to_back=[0.0001] * 3)

    report(noop, true, durable, ade, commits)

    out = capsys.readouterr().out
    assert "ADE / raw-true throughput = 0.500  (target >= 0.5)  PASS" in out
    assert "(round by round: 0.400, 0.667)" in out
    assert "ADE p50 / raw no-op p50   = 4.0  (target <= 3)  MISS" in out


def test_the_floor_is_raw_true_plus_two_commits_after_an_idle_gap() -> None:
    true = _result("raw true", 2.0)
    commits = CommitProbe(after_idle=[0.0008, 0.0010, 0.0012], back_to_back=[0.0001] * 3)

    assert p50_floor(true, commits) == pytest.approx(0.002 + 2 * 0.0010)


@pytest.mark.parametrize(
    ("commit_ms", "reach", "floor_ratio"),
    [(1.5, "out of reach", "3.5"), (0.5, "within reach", "1.5")],
)
def test_the_report_says_whether_the_commits_alone_leave_the_p50_target_in_reach(
    capsys: pytest.CaptureFixture[str], commit_ms: float, reach: str, floor_ratio: str
) -> None:
    noop, true, ade = _result("noop", 1.0), _result("true", 0.5), _result("ade", 5.0, 40.0)
    commits = CommitProbe(after_idle=[commit_ms / 1000] * 3, back_to_back=[0.0001] * 3)

    report(noop, true, _result("durable", 5.0), ade, commits)

    out = capsys.readouterr().out
    assert f"the p50 ratio cannot go below {floor_ratio} here ({reach} of the target" in out
    rest = 5.0 - 0.5 - 2 * commit_ms
    assert f"ADE p50 - floor = {rest:.1f} ms" in out


def test_the_report_gives_ade_against_the_durable_celery_side_round_by_round(
    capsys: pytest.CaptureFixture[str],
) -> None:
    noop = _result("noop", 1.0, 500.0)
    true = Result("true", "tasks", bursts=[(400, 1.0)] * 2, latencies=[0.002] * 3)
    durable = Result(
        "durable", "tasks", bursts=[(100, 1.0), (100, 1.0)], latencies=[0.008, 0.008, 0.004, 0.004]
    )
    ade = Result(
        "ade", "runs", bursts=[(200, 1.0), (100, 1.0)], latencies=[0.004, 0.004, 0.004, 0.004]
    )
    durable.trips_per_round = ade.trips_per_round = 2
    commits = CommitProbe(after_idle=[0.0003] * 3, back_to_back=[0.0001] * 3)

    report(noop, true, durable, ade, commits)

    out = capsys.readouterr().out
    assert (
        "ADE / durable-celery throughput = 1.500  (target >= 1.5)  PASS"
        "   (round by round: 2.000, 1.000)" in out
    )
    assert "ADE p50 / durable-celery p50    = 0.67   (round by round: 0.50, 1.00)" in out


@pytest.mark.parametrize("months", ["-1", "121"])
def test_a_history_outside_zero_to_ten_years_is_refused_with_the_range(
    months: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--months", months])

    assert "0 <= --months <= 120" in capsys.readouterr().err


def test_the_months_of_history_default_to_none_and_take_a_count() -> None:
    assert parse_args([]).months == 0
    assert parse_args(["--months", "24"]).months == 24
