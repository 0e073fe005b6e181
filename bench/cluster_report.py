"""The cluster simulation's figures: the runs of the measured window read back from the
database, put against their trigger instants, and printed with where the cluster bent.

A run's trigger instant is real time: for a cron run, the moment its slot came due on the
beats' simulated clock (anchor + (slot - origin) / speed); for a webhook run, when its delivery
left the load generator (its idempotency key carries the delivery id); for a manual run, when
its request left (its answer carried the run id). A run is in the window when its trigger
instant is; a run that never started counts, in the latency windows, as waiting until the
figures were read.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Engine, text

from bench import cluster_mix, cluster_verdict
from bench.cluster_load import LoadLog
from bench.cluster_probe import DB_QUEUED, OTHER, UNACKED, Snapshot, intervals, queue_series
from bench.cluster_probe import spent_between as cpu_between
from bench.cluster_verdict import FOREIGN_LIMIT
from bench.common import percentile

KINDS = ("cron", "webhook", "manual")
LATENCY_WINDOW_SECONDS = 10.0


@dataclass(frozen=True)
class Run:
    kind: str
    trigger_at: float  # epoch seconds
    queued: float
    started: float | None
    status: str


@dataclass
class Outcome:
    """Everything one simulation measured."""

    args: argparse.Namespace
    loadavg_before: tuple[float, float, float]
    sizes: dict[str, int] = field(default_factory=dict)
    prefill_seconds: float = 0.0
    sync_seconds: float = 0.0
    beats_ready_seconds: float = 0.0
    drain_seconds: float = 0.0
    clock: tuple[datetime, datetime, float] | None = None  # origin, anchor, speed
    window: tuple[float, float] = (math.nan, math.nan)  # epoch seconds
    window_monotonic: float = math.nan
    load: LoadLog = field(default_factory=LoadLog)
    snapshots: list[Snapshot] = field(default_factory=list)
    probe_errors: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    runs_created: int = 0
    unmatched: int = 0
    occurrences: dict[str, int] = field(default_factory=dict)
    ingress: dict[str, int] = field(default_factory=dict)
    collected_at: float = math.nan

    def in_window(self, kind: str | None = None) -> list[Run]:
        start, end = self.window
        return [r for r in self.runs if start <= r.trigger_at < end and kind in (None, r.kind)]


_RUNS = text(
    "SELECT id, trigger_type, trigger->>'slot' AS slot, idempotency_key, status, queued_at,"
    " started_at FROM runs WHERE queued_at >= :since"
)
_OCCURRENCES = text(
    "SELECT outcome, count(*) FROM schedule_occurrences"
    " WHERE claimed_at >= :start AND claimed_at < :end AND rule_id LIKE 'sim-%'"
    " GROUP BY outcome"
)
_INGRESS = text(
    "SELECT status, count(*) FROM ingress_events"
    " WHERE received_at >= :start AND received_at < :end GROUP BY status"
)


def collect(engine: Engine, out: Outcome) -> None:
    """Read back the simulation's runs, occurrences and ingress events."""
    assert out.clock is not None
    origin, anchor, speed = out.clock
    sent = {s.key: s.sent for s in (*out.load.webhooks, *out.load.manual) if s.key}
    start, end = (datetime.fromtimestamp(t, origin.tzinfo) for t in out.window)
    with engine.connect() as connection:
        rows = connection.execute(_RUNS, {"since": anchor}).all()
        out.occurrences = dict(connection.execute(_OCCURRENCES, {"start": start, "end": end}).all())
        out.ingress = dict(connection.execute(_INGRESS, {"start": start, "end": end}).all())
    out.runs_created = len(rows)
    for row in rows:
        trigger_at: float | None
        if row.trigger_type == "schedule" and row.slot:
            kind = "cron"
            due = datetime.fromisoformat(row.slot) - origin
            trigger_at = anchor.timestamp() + due.total_seconds() / speed
        elif str(row.trigger_type).startswith("github"):
            kind = "webhook"
            trigger_at = sent.get(str(row.idempotency_key).split(":")[1])
        else:
            kind = "manual"
            trigger_at = sent.get(row.id)
        if trigger_at is None:
            out.unmatched += 1
            continue
        started = row.started_at.timestamp() if row.started_at else None
        out.runs.append(Run(kind, trigger_at, row.queued_at.timestamp(), started, row.status))


# --- figures ------------------------------------------------------------------------------------


def _s(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds:.2f} s"


def _p(values: Sequence[float]) -> str:
    return f"{_s(percentile(values, 50)):>9} {_s(percentile(values, 99)):>9}"


def latency_windows(out: Outcome) -> list[tuple[float, float, int]]:
    """(window end from the window start, p99 trigger-to-start, runs) per latency window;
    a run that never started waits until the figures were read."""
    start, end = out.window
    buckets: dict[int, list[float]] = collections.defaultdict(list)
    for run in out.in_window():
        waited = (run.started if run.started is not None else out.collected_at) - run.trigger_at
        buckets[int((run.trigger_at - start) // LATENCY_WINDOW_SECONDS)].append(waited)
    last = int((end - start) // LATENCY_WINDOW_SECONDS)
    return [
        ((i + 1) * LATENCY_WINDOW_SECONDS, percentile(buckets[i], 99), len(buckets[i]))
        for i in range(last)
        if buckets.get(i)
    ]


def window_cpu(out: Outcome) -> tuple[dict[str, float], float]:
    """CPU seconds per component over the measured window (the samples closest inside it)."""
    start = out.window_monotonic
    end = start + out.window[1] - out.window[0]
    inside = [s for s in out.snapshots if start - 1 <= s.at <= end + 1]
    if len(inside) < 2:
        return {}, 0.0
    return cpu_between(inside[0], inside[-1], os.cpu_count() or 1), inside[-1].at - inside[0].at


def bends(out: Outcome) -> list[cluster_verdict.Bend | None]:
    start = out.window_monotonic
    duration = out.window[1] - out.window[0]
    cores = os.cpu_count() or 1
    found = [
        cluster_verdict.cpu_bend(
            [i for i in intervals(out.snapshots, start, cores) if 0 < i.at <= duration + 1]
        )
    ]
    for name, series in queue_series(out.snapshots, start).items():
        if name != UNACKED:
            found.append(cluster_verdict.queue_bend(name, [p for p in series if p[0] <= duration]))
    found.append(cluster_verdict.latency_bend(latency_windows(out), out.args.p99_bound))
    return found


def measured(out: Outcome, spent: dict[str, float]) -> cluster_verdict.Measured:
    """The figures the plan scales: the load offered (the mix's slots and the rates sent, not
    what a saturated cluster managed to start) and the CPU per run that did start."""
    args = out.args
    started = [r for r in out.in_window() if r.started is not None]
    count = max(1, len(started))
    cron = max(1, sum(1 for r in started if r.kind == "cron"))
    api = max(1, len(started) - sum(1 for r in started if r.kind == "cron"))
    grown = out.sizes.get("end", 0) - out.sizes.get("start", 0)
    offered_cron = cluster_mix.cron_runs_per_second(args.rules, args.speed)
    offered_api = (args.webhooks_per_s + args.manual_per_s) * args.speed
    return cluster_verdict.Measured(
        speed=args.speed,
        runs_per_s=offered_cron + offered_api,
        cron_runs_per_s=offered_cron,
        api_runs_per_s=offered_api,
        cpu_ms_per_run={k: v * 1000 / count for k, v in spent.items()},
        beats_ms_per_cron_run=spent.get("beats", 0.0) * 1000 / cron,
        api_ms_per_api_run=spent.get("api", 0.0) * 1000 / api,
        bytes_per_million_runs=grown / max(1, out.runs_created) * 1e6,
        worker_concurrency=args.concurrency,
    )


# --- the report ---------------------------------------------------------------------------------


def report(out: Outcome) -> None:
    args = out.args
    duration = out.window[1] - out.window[0]
    print()
    print(
        f"{args.rules:,} rules, {args.prefill_runs:,} prefilled runs, {args.speed:g}x real time,"
        f" {duration:.0f} s measured; {args.workers} workers x {args.concurrency}, {args.beats}"
        f" beats, {args.api_processes} API process(es); {os.cpu_count()} cores; load average"
        f" before {out.loadavg_before[0]:.2f}, after {os.getloadavg()[0]:.2f}"
    )
    mix = ", ".join(f"{k} {n:,}" for k, n in cluster_mix.counts(args.rules).items())
    print(f"  mix: {mix}")
    print(
        f"  setup: prefill {out.prefill_seconds:.0f} s, rule sync {out.sync_seconds:.1f} s,"
        f" beats ready {out.beats_ready_seconds:.1f} s; drain after the window"
        f" {out.drain_seconds:.1f} s"
    )
    report_runs(out, duration)
    report_queues(out)
    report_size(out)
    spent, seconds = window_cpu(out)
    report_cpu(out, spent, seconds)
    found = bends(out)
    bend = cluster_verdict.first_bend(found)
    print()
    if bend is None:
        print(f"WHERE IT BENDS: nothing saturated at {args.speed:g}x (no core, queue or p99 bound)")
    else:
        print(f"WHERE IT BENDS: {bend.resource}, {bend.at:.0f} s into the window")
        print(f"    {bend.evidence}")
    others = [b for b in found if b is not None and b is not bend]
    for other in sorted(others, key=lambda b: b.at)[:5]:
        print(f"  then: {other.resource} at {other.at:.0f} s: {other.evidence}")
    if spent and out.in_window() and any(r.started for r in out.in_window()):
        print()
        print(
            f"A team {args.team_factor:g}x as large (same rule mix; the load offered here scaled,"
            " CPU per run started as measured):"
        )
        for need in cluster_verdict.plan(measured(out, spent), args.team_factor):
            print(f"  {need.what:40} {need.amount}")
            print(f"  {'':40} = {need.arithmetic}")
    for error in out.probe_errors[:3]:
        print(f"  sample lost: {error}")


def report_runs(out: Outcome, duration: float) -> None:
    print()
    print(
        f"{'runs in the window':22} {'triggered':>9} {'/s':>7} {'started':>8} {'/s':>7}"
        f" {'trigger->start':>19} {'trigger->queued':>19} {'queued->start':>19}"
    )
    print(f"{'':22} {'':>9} {'':>7} {'':>8} {'':>7}" + f" {'p50':>9} {'p99':>9}" * 3)
    for kind in (*KINDS, None):
        runs = out.in_window(kind)
        started = [r for r in runs if r.started is not None]
        waits = [r.started - r.trigger_at for r in started if r.started is not None]
        queued = [r.queued - r.trigger_at for r in runs]
        waiting = [r.started - r.queued for r in started if r.started is not None]
        print(
            f"{kind or 'all':22} {len(runs):9} {len(runs) / duration:7.1f} {len(started):8}"
            f" {len(started) / duration:7.1f} {_p(waits)} {_p(queued)} {_p(waiting)}"
        )
    statuses = collections.Counter(r.status for r in out.in_window())
    print(f"  statuses: {dict(statuses)}; occurrences claimed in the window: {out.occurrences}")
    hooks, manual = out.load.webhooks, out.load.manual
    for label, sent in (("webhooks", hooks), ("manual runs", manual)):
        ok = [s.seconds for s in sent if s.status == 202]
        late = sum(1 for s in sent if s.late)
        print(
            f"  {label}: {len(sent)} sent, {len(ok)} accepted, {late} sent late; answer"
            f" p50/p99 {_p(ok).strip()}"
        )
    print(f"  ingress events received in the window: {out.ingress}")
    for kind, detail in out.load.first_errors.items():
        print(f"  first {kind}: {detail[:200]}")
    if out.unmatched:
        print(f"  {out.unmatched} runs without a trigger instant (not counted)")


def report_queues(out: Outcome) -> None:
    print()
    start = out.window_monotonic
    for name, series in queue_series(out.snapshots, start).items():
        if not series:
            continue
        depths = [d for _, d in series]
        label = f"{name} (prefetched, not acked)" if name == UNACKED else name
        note = " (broker lists hold run ids; this is the work itself)" if name == DB_QUEUED else ""
        print(
            f"queue {label:40} max {max(depths):7} mean {sum(depths) / len(depths):9.1f}"
            f" at the end {depths[-1]:7}{note}"
        )


def report_size(out: Outcome) -> None:
    sizes = out.sizes
    prefill = out.args.prefill_runs
    per_prefill = (sizes["prefilled"] - sizes["empty"]) / prefill * 1e6 if prefill else math.nan
    grown = sizes.get("end", 0) - sizes.get("start", 0)
    per_run = grown / out.runs_created * 1e6 if out.runs_created else math.nan
    print()
    print(
        f"database: {sizes['empty'] / 1e6:.0f} MB empty, {sizes['prefilled'] / 1e6:.0f} MB"
        f" prefilled ({_mb(per_prefill)} per million prefilled runs, no steps or events),"
        f" {sizes.get('end', 0) / 1e6:.0f} MB at the end: +{grown / 1e6:.1f} MB for"
        f" {out.runs_created:,} simulated runs = {_mb(per_run)} per million runs"
        " (runs, steps, occurrences, ingress events, indexes)"
    )


def _mb(size: float) -> str:
    return "-" if math.isnan(size) else f"{size / 1e6:.0f} MB"


def report_cpu(out: Outcome, spent: dict[str, float], seconds: float) -> None:
    started = [r for r in out.in_window() if r.started is not None]
    if not spent or not started:
        print("CPU: not enough samples or no run started in the window")
        return
    per = 1000 / len(started)
    cores = (os.cpu_count() or 1) * seconds
    print()
    print(f"CPU over {seconds:.0f} s sampled, per run started ({len(started):,}):")
    for name, value in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {name:42} {value * per:8.2f} ms/run  {value / seconds:5.2f} cores")
    print(f"  {'capacity':42} {cores * per:8.2f} ms/run  {cores / seconds:5.2f} cores")
    foreign = spent.get(OTHER, 0.0) / cores
    if foreign > FOREIGN_LIMIT / 2:
        print(f"  WARNING: other sessions used {foreign:.0%} of the machine: figures skewed")
