"""What the cluster simulation concludes from its samples: where it bends, and what a larger team
would need. Pure (no services), so a unit test keeps the rules and the arithmetic honest.

Where it bends is the first of these, by the time it happened (seconds from the start of load):

* **a core**: one process (a beat, Redis, an API process, a worker's pool process, a PostgreSQL
  backend) busy more than `CPU_THRESHOLD` of one core for `SUSTAIN` sampling intervals in a row;
  such a process is single-threaded at heart, so it cannot go faster however idle the rest is;
* **the machine**: all cores together busy more than `CPU_THRESHOLD` for `SUSTAIN` intervals while
  processes outside the simulation used less than `FOREIGN_LIMIT` of them (on a shared machine
  the others' share is noise, not the cluster's limit; the evidence names what used the cores);
* **a queue**: a queue's depth (a broker list, or the runs `queued` in the database) never
  falling, and never empty, over `QUEUE_SAMPLES` samples in a row after the first while it grew
  by at least `QUEUE_MIN_GROWTH`: work arrives faster than it leaves. A queue seen empty has
  kept up until then, so a boundary's burst arriving after empty samples is not growth (the
  burst is still caught if the queue then keeps growing);
* **latency**: the p99 trigger-to-start of the runs triggered in a window passing the bound in
  `SUSTAIN` windows in a row.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

CPU_THRESHOLD = 0.9
SUSTAIN = 2
QUEUE_SAMPLES = 8
QUEUE_MIN_GROWTH = 20
FOREIGN_LIMIT = 0.25  # all cores busy counts only while other sessions used less than this


@dataclass(frozen=True)
class Interval:
    """CPU between two samples: cores used by each watched process and by the whole machine."""

    at: float  # seconds from the start of load, at the interval's end
    seconds: float
    process_cores: Mapping[str, float]  # "beat-1", "postgres backend 4711", ...
    machine_busy: float  # share of all cores not idle, 0..1
    component_cores: Mapping[str, float] = field(default_factory=dict)
    foreign_share: float = 0.0  # share of all cores used by processes outside the simulation


@dataclass(frozen=True)
class Bend:
    """The first sign of saturation: when, which resource, and the figures that show it."""

    at: float
    resource: str
    evidence: str


def cpu_bend(intervals: Sequence[Interval], threshold: float = CPU_THRESHOLD) -> Bend | None:
    """The first process or the machine above `threshold` for `SUSTAIN` intervals in a row."""
    streak: dict[str, int] = {}
    for interval in intervals:
        hot = {name: cores for name, cores in interval.process_cores.items() if cores > threshold}
        # A machine kept busy by other sessions (a shared machine) is not the cluster bending.
        if interval.machine_busy > threshold and interval.foreign_share < FOREIGN_LIMIT:
            hot["the machine"] = interval.machine_busy
        streak = {name: streak.get(name, 0) + 1 for name in hot}
        done = sorted((name for name, n in streak.items() if n >= SUSTAIN), key=lambda n: -hot[n])
        if not done:
            continue
        name = done[0]
        users = sorted(interval.component_cores.items(), key=lambda kv: -kv[1])
        spent = ", ".join(f"{k} {v:.2f}" for k, v in users[:6])
        if name == "the machine":
            return Bend(
                interval.at,
                "CPU: all cores",
                f"{hot[name]:.0%} of all cores busy for {SUSTAIN} intervals in a row"
                f" (the last {interval.seconds:.1f} s, cores: {spent})",
            )
        return Bend(
            interval.at,
            f"CPU: one core ({name})",
            f"{name} used {hot[name]:.2f} of a core for {SUSTAIN} intervals in a row"
            f" (the last {interval.seconds:.1f} s; cores by component: {spent})",
        )
    return None


def queue_bend(
    name: str,
    series: Sequence[tuple[float, int]],
    samples: int = QUEUE_SAMPLES,
    min_growth: int = QUEUE_MIN_GROWTH,
) -> Bend | None:
    """The end of the first `samples` samples in a row of (at, depth) that never fell, were never
    empty after the first, and grew by at least `min_growth`."""
    for end in range(samples - 1, len(series)):
        window = series[end - samples + 1 : end + 1]
        rising = all(b[1] >= a[1] for a, b in itertools.pairwise(window))
        backlogged = all(depth > 0 for _, depth in window[1:])
        grew = window[-1][1] - window[0][1]
        if rising and backlogged and grew >= min_growth:
            depths = ", ".join(str(depth) for _, depth in window)
            return Bend(
                window[-1][0],
                f"queue: {name}",
                f"{name} grew from {window[0][1]} to {window[-1][1]} over"
                f" {window[-1][0] - window[0][0]:.0f} s without falling once ({samples} samples:"
                f" {depths})",
            )
    return None


def latency_bend(windows: Sequence[tuple[float, float, int]], bound: float) -> Bend | None:
    """The first of `SUSTAIN` windows in a row of (end, p99 trigger-to-start, runs) past `bound`."""
    streak = 0
    for at, p99, runs in windows:
        streak = streak + 1 if p99 > bound else 0
        if streak >= SUSTAIN:
            return Bend(
                at,
                "latency: p99 trigger-to-start",
                f"p99 {p99:.2f} s over the {runs} runs triggered in the window ending at"
                f" {at:.0f} s, past the bound {bound:g} s for {SUSTAIN} windows in a row",
            )
    return None


def first_bend(bends: Sequence[Bend | None]) -> Bend | None:
    """The earliest of the bends found (None: nothing saturated)."""
    found = [b for b in bends if b is not None]
    return min(found, key=lambda b: b.at) if found else None


# --- a larger team ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """What one simulation measured, per run and per second of real time."""

    speed: float  # the load multiple the simulation ran at
    runs_per_s: float  # runs offered per second during the load (what the team asks for)
    cron_runs_per_s: float
    api_runs_per_s: float  # webhook + manual runs (the API's requests)
    cpu_ms_per_run: Mapping[str, float]  # "workers", "postgres", "redis"
    beats_ms_per_cron_run: float  # of all the beats together (they share the slots by shard)
    api_ms_per_api_run: float
    bytes_per_million_runs: float
    worker_concurrency: int


@dataclass(frozen=True)
class Need:
    """One line of the plan: what, how many, and the arithmetic behind it."""

    what: str
    amount: str
    arithmetic: str


def plan(
    measured: Measured, factor: float = 10.0, utilization: float = 0.7, retention_days: int = 30
) -> list[Need]:
    """What a team `factor` times this one (measured at `speed` times its own rate) would need,
    with every process kept under `utilization` of what it can do."""
    scale = factor / measured.speed  # from the simulated load to the larger team's
    rate = measured.runs_per_s * scale
    cron = measured.cron_runs_per_s * scale
    api = measured.api_runs_per_s * scale
    per = measured.cpu_ms_per_run
    needs = []
    worker_cores = rate * per.get("workers", 0.0) / 1000 / utilization
    processes = max(1, math.ceil(worker_cores / measured.worker_concurrency))
    needs.append(
        Need(
            "workers",
            f"{processes} x prefork -c {measured.worker_concurrency} ({worker_cores:.1f} cores)",
            f"{rate:.1f} runs/s x {per.get('workers', 0.0):.1f} ms / {utilization:.0%}",
        )
    )
    # The beats share a boundary's slots by shard (ade_tasks.schedule.shards), so their CPU
    # together is what the slots cost, however many run; a survivor takes a dead beat's shards.
    beat_cores = cron * measured.beats_ms_per_cron_run / 1000
    sharing = max(1, math.ceil(beat_cores / utilization))
    needs.append(
        Need(
            "beats",
            f"{sharing + 2} ({beat_cores:.2f} cores together; they share the slots by shard, and"
            " two more are for failover)",
            f"{cron:.1f} slots/s x {measured.beats_ms_per_cron_run:.2f} ms = {beat_cores:.2f}"
            f" core for the beats together, at most {utilization:.0%} of a core each",
        )
    )
    api_cores = api * measured.api_ms_per_api_run / 1000 / utilization
    needs.append(
        Need(
            "API processes",
            f"{max(1, math.ceil(api_cores))} ({api_cores:.2f} cores)",
            f"{api:.1f} webhook + manual runs/s x {measured.api_ms_per_api_run:.1f} ms"
            f" / {utilization:.0%}",
        )
    )
    pg = rate * per.get("postgres", 0.0) / 1000 / utilization
    needs.append(
        Need(
            "PostgreSQL cores",
            f"{pg:.1f}",
            f"{rate:.1f} runs/s x {per.get('postgres', 0.0):.2f} ms / {utilization:.0%}",
        )
    )
    broker = rate * per.get("redis", 0.0) / 1000
    verdict = "fits one Redis" if broker <= utilization else "more than one Redis core: shard"
    needs.append(
        Need(
            "broker (Redis, one thread)",
            f"{broker:.2f} core, {verdict}",
            f"{rate:.1f} runs/s x {per.get('redis', 0.0):.2f} ms",
        )
    )
    runs = rate * 86_400 * retention_days
    size = runs / 1e6 * measured.bytes_per_million_runs
    needs.append(
        Need(
            f"database size ({retention_days} days of history)",
            f"{size / 1e9:.0f} GB ({runs / 1e6:.0f}M runs)",
            f"{rate:.1f} runs/s x 86,400 s x {retention_days} d x"
            f" {measured.bytes_per_million_runs / 1e9:.2f} GB per million runs",
        )
    )
    return needs
