"""The pure parts of the cluster simulation (bench/cluster.py): the rule mix, where it bends, and
the arithmetic for a larger team. The simulation itself needs the whole cluster; these keep its
conclusions from rotting unnoticed."""

from __future__ import annotations

import math

import pytest

from ade_tasks.rules.rule import Rule
from bench import cluster_mix, cluster_verdict
from bench.cluster_verdict import Interval, Measured
from bench.common import BenchError


def test_the_mix_gives_every_kind_its_share_and_valid_rules() -> None:
    # Given 10,000 rules of the mix
    counts = cluster_mix.counts(10_000)
    docs, layout = cluster_mix.documents(10_000)

    # Then the kinds add up, every document is a valid rule, and the events reach their rules
    assert sum(counts.values()) == 10_000
    assert counts == {
        "every minute": 20,
        "every 5 minutes": 100,
        "every 15 minutes": 200,
        "hourly": 1000,
        "every 6 hours": 1500,
        "daily": 6000,
        "github.pr_opened": 400,
        "manual only": 780,
    }
    rules = [Rule.model_validate(doc) for doc in docs]
    assert len({rule.id for rule in rules}) == 10_000
    assert len(layout.webhook_repos) == 400 == len(set(layout.webhook_repos))
    assert len(layout.manual_rules) == 780
    # any prefix holds the kinds in their shares (interleaved, not in blocks)
    first_thousand = [doc["triggers"][0] for doc in docs[:1000]]  # type: ignore[index]
    assert sum(1 for t in first_thousand if t.get("cron") == "* * * * *") == 2
    assert sum(1 for t in first_thousand if t["type"] == "github.pr_opened") == 40


def test_cron_rate_is_the_sum_of_each_kinds_slots() -> None:
    # 20 x 1 + 100 / 5 + 200 / 15 + 1000 / 60 + 1500 / 360 + 6000 / 1440 slots per minute
    per_minute = 20 + 20 + 200 / 15 + 1000 / 60 + 1500 / 360 + 6000 / 1440
    assert cluster_mix.cron_runs_per_second(10_000, 1) == pytest.approx(per_minute / 60)
    assert cluster_mix.cron_runs_per_second(10_000, 10) == pytest.approx(per_minute / 6)


def test_the_mix_refuses_fewer_rules_than_kinds() -> None:
    with pytest.raises(BenchError, match="at least 8 rules"):
        cluster_mix.counts(7)


def _interval(at: float, processes: dict[str, float], busy: float = 0.5) -> Interval:
    return Interval(at, 2.0, processes, busy, {"workers": 0.8, "beats": 0.1})


def test_one_process_on_a_full_core_for_two_intervals_is_where_it_bends() -> None:
    # Given a beat that spikes once, then a Redis that stays on a full core
    intervals = [
        _interval(2, {"beats 1": 0.95, "redis": 0.3}),
        _interval(4, {"beats 1": 0.2, "redis": 0.92}),
        _interval(6, {"beats 1": 0.2, "redis": 0.97}),
    ]

    # Then the spike is no bend and Redis is, when its second interval ended
    bend = cluster_verdict.cpu_bend(intervals)
    assert bend is not None
    assert (bend.at, bend.resource) == (6, "CPU: one core (redis)")
    assert "0.97 of a core" in bend.evidence and "workers 0.80" in bend.evidence


def test_all_cores_busy_is_the_machine_bending() -> None:
    intervals = [_interval(2, {}, 0.95), _interval(4, {}, 0.93), _interval(6, {}, 0.4)]
    bend = cluster_verdict.cpu_bend(intervals)
    assert bend is not None
    assert (bend.at, bend.resource) == (4, "CPU: all cores")
    assert "93% of all cores" in bend.evidence


def test_a_machine_kept_busy_by_other_sessions_is_not_the_cluster_bending() -> None:
    busy = [
        Interval(t, 2.0, {}, 0.98, {"other processes on the machine": 1.1}, 0.55) for t in (2, 4)
    ]
    assert cluster_verdict.cpu_bend(busy) is None


def test_an_idle_enough_cluster_does_not_bend() -> None:
    intervals = [_interval(t, {"redis": 0.5}, 0.85) for t in (2, 4, 6, 8)]
    assert cluster_verdict.cpu_bend(intervals) is None


def test_a_queue_that_never_falls_and_grows_bends() -> None:
    # Given a queue that wobbles, then grows without falling for eight samples (from the 3 at
    # 4 s, which the growth starts from)
    series = [(0, 5), (2, 9), (4, 3), *[(6 + 2 * i, 3 + 10 * i) for i in range(8)]]

    bend = cluster_verdict.queue_bend("ade.builtin", series)

    assert bend is not None
    assert bend.at == 18 and bend.resource == "queue: ade.builtin"
    assert "from 3 to 63 over 14 s" in bend.evidence


def test_a_burst_after_an_empty_queue_is_not_growth_until_it_keeps_growing() -> None:
    # Given a queue empty for seven samples, then one boundary's burst of 120
    burst = [*[(2 * i, 0) for i in range(7)], (14, 120)]

    assert cluster_verdict.queue_bend("ade.builtin", burst) is None

    # ... which bends once it has grown for seven intervals without emptying
    growing = [*burst, *[(16 + 2 * i, 130 + 10 * i) for i in range(7)]]
    bend = cluster_verdict.queue_bend("ade.builtin", growing)
    assert bend is not None
    assert bend.at == 26 and "from 0 to 180 over 14 s" in bend.evidence
    assert "(8 samples: 0, 120, 130, 140, 150, 160, 170, 180)" in bend.evidence


def test_a_queue_that_drains_between_bursts_does_not_bend() -> None:
    series = [(2 * i, 50 if i % 3 else 0) for i in range(30)]
    assert cluster_verdict.queue_bend("ade.builtin", series) is None
    flat = [(2 * i, 4) for i in range(30)]  # never falls, but does not grow either
    assert cluster_verdict.queue_bend("ade.builtin", flat) is None


def test_p99_past_the_bound_in_two_windows_in_a_row_bends() -> None:
    windows = [(10.0, 7.0, 50), (20.0, 1.0, 50), (30.0, 6.0, 40), (40.0, 9.0, 45)]
    bend = cluster_verdict.latency_bend(windows, bound=5.0)
    assert bend is not None and bend.at == 40.0 and "p99 9.00 s" in bend.evidence
    assert cluster_verdict.latency_bend(windows[:3], bound=5.0) is None


def test_the_first_bend_is_the_earliest() -> None:
    late = cluster_verdict.Bend(30, "queue: x", "")
    early = cluster_verdict.Bend(12, "CPU: all cores", "")
    assert cluster_verdict.first_bend([None, late, early]) is early
    assert cluster_verdict.first_bend([None, None]) is None


def test_the_plan_scales_the_measured_load_to_the_larger_team() -> None:
    # Given a simulation at 5x that started 50 runs/s (40 cron, 10 from the API)
    measured = Measured(
        speed=5,
        runs_per_s=50,
        cron_runs_per_s=40,
        api_runs_per_s=10,
        cpu_ms_per_run={"workers": 14.0, "postgres": 3.5, "redis": 0.5},
        beats_ms_per_cron_run=2.0,
        api_ms_per_api_run=7.0,
        bytes_per_million_runs=2e9,
        worker_concurrency=2,
    )

    # When planning for a team 10x the simulated one's base (2x the simulated load)
    needs = {n.what: n for n in cluster_verdict.plan(measured, factor=10, utilization=0.7)}

    # Then 100 runs/s: 100 x 14 ms / 0.7 = 2 cores of workers = 1 worker of -c 2
    assert needs["workers"].amount == "1 x prefork -c 2 (2.0 cores)"
    # 80 slots/s x 2 ms = 0.16 of a core for the beats together: one carries it, two for failover
    assert needs["beats"].amount.startswith("3 (0.16 cores together")
    assert "= 0.16 core for the beats together" in needs["beats"].arithmetic
    # 20 API runs/s x 7 ms / 0.7 = 0.2 cores
    assert needs["API processes"].amount == "1 (0.20 cores)"
    assert needs["PostgreSQL cores"].amount == "0.5"
    assert needs["broker (Redis, one thread)"].amount == "0.05 core, fits one Redis"
    # 100 runs/s x 86,400 s x 30 days = 259.2M runs x 2 GB per million
    assert needs["database size (30 days of history)"].amount == "518 GB (259M runs)"


def test_the_plan_adds_beats_when_the_slots_need_more_than_one() -> None:
    # 1,000 slots/s x 10 ms = 10 cores for the beats together: 15 beats at 70 %, two spare
    measured = Measured(5, 500, 500, 0, {"workers": 1.0}, 10.0, 1.0, 1e9, 2)
    needs = {n.what: n for n in cluster_verdict.plan(measured, factor=10)}
    assert needs["beats"].amount.startswith("17 (10.00 cores together")
    assert math.isclose(float(needs["beats"].arithmetic.split("= ")[1].split()[0]), 10.0)
