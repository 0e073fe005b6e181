"""The ADE side of `bench/beat.py`: N minutely rules, real `DatabaseScheduler` beats, and the
boundaries they fire, each measured from just before the minute until its work is done."""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import redis
from sqlalchemy import Engine

from ade_tasks.db.engine import create_session_factory
from ade_tasks.db.rule_sync import sync_file_rules
from ade_tasks.rules.loader import LoadedRule, content_hash, parse_rule
from ade_tasks.rules.rule import Rule
from ade_workers.celery.app import BUILTIN_QUEUE
from bench import beat_once
from bench.beat_processes import (
    Child,
    CpuSample,
    base_env,
    cpu_note,
    cpu_seconds,
    iso,
    plan_boundary,
    sleep_until,
    start_child,
    stop_children,
)
from bench.beat_results import Result, offsets_result, secs
from bench.beat_slot import (
    OnceCheck,
    beat_split,
    check_once,
    claim_housekeeping,
    claim_span,
    cpu_groups,
    finish_runs,
    housekeeping_claims,
    queued_offsets,
    runs_of_slot,
    wait_beats_ready,
    wait_runs,
    wait_settled,
)
from bench.common import BenchError

#: Seconds between the boundaries a side fires (the rules are minutely).
MINUTE = 60.0


def rule_id(index: int) -> str:
    """The id of the bench's rule number `index`."""
    return f"bench-{index:06d}"


def bench_rules(count: int) -> list[LoadedRule]:
    """`count` minutely rules, each one `run-command: true` step, as a rules directory would
    load them: one rule validated with admission's checks, copied per id (validating 100,000
    identical documents, or writing and reading 100,000 rules of YAML, would be most of the
    setup and measure nothing of the beat)."""
    document = {
        "id": rule_id(0),
        "triggers": [{"type": "schedule", "cron": "* * * * *"}],
        "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]},
    }
    template = parse_rule(document, "bench")
    if not isinstance(template, Rule):
        raise BenchError(f"the bench rule does not load: {template[:3]}")
    loaded = []
    for index in range(count):
        rule = template.model_copy(update={"id": rule_id(index)})
        source = f"bench-{index // 1000:06d}.yaml"  # as if 1,000 a file
        stored = rule.document()
        loaded.append(
            LoadedRule(rule.id, source, content_hash(stored), document=stored, parsed=rule)
        )
    return loaded


def prepare_rules(engine: Engine, work: Path, count: int) -> None:
    """Write the bench's rules the way `rules sync` writes them: its bulk upsert
    (`sync_file_rules`, one transaction), from rules loaded in memory (`bench_rules`)."""
    (work / "project").mkdir()
    with create_session_factory(engine).begin() as session:
        report = sync_file_rules(session, bench_rules(count), remove_missing=True)
    if len(report.added) != count:
        raise BenchError(f"the sync added {len(report.added)} of {count} bench rules")


@dataclass
class Boundary:
    """One boundary a side fired: its figures, its exactly-once check, each beat's CPU."""

    result: Result
    once: OnceCheck
    beats_cpu: float  # seconds, all beats, inside the window
    postgres_cpu: float  # seconds, the scratch database's backends, inside the window
    per_beat: dict[str, float] = field(default_factory=dict)

    @property
    def cpu_ms(self) -> float:
        """Beats' and PostgreSQL's CPU per occurrence, ms."""
        return self.result.cpu_ms

    @property
    def beats_ms(self) -> float:
        """The beats' CPU per occurrence, ms."""
        return self.beats_cpu * 1000 / self.result.count


@dataclass
class Side:
    """What `count_beats` beats did: start-up, then each boundary, the measured one last."""

    beats: int
    startup: float
    startup_cpu: list[float]
    boundaries: list[Boundary]
    one_shots: beat_once.OneShots | None = None

    @property
    def measured(self) -> Boundary:
        return self.boundaries[-1]

    @property
    def first(self) -> Boundary:
        return self.boundaries[0]


def start_beats(count: int, env: dict[str, str], work: Path) -> list[Child]:
    """`count` real `celery beat` processes with ADE's `DatabaseScheduler`."""
    beats = []
    for index in range(count):
        argv = [
            sys.executable, "-m", "celery", "-A", "ade_workers.celery.app", "beat",
            "-S", "ade_workers.celery.beat:DatabaseScheduler", "--loglevel", "WARNING",
            "-s", str(work / f"beat-{index}-{time.monotonic_ns()}.schedule"),
        ]  # fmt: skip
        beats.append(start_child(f"beat-{index}", argv, env, work, work))
    return beats


def measure_boundary(
    engine: Engine, beats: list[Child], count: int, boundary: float, deadline: float
) -> Boundary:
    """Fire one boundary (epoch seconds) and measure it: CPU of the beats and the scratch
    database's backends from just before the minute until every outcome is recorded and every
    beat has tried every shard (`wait_settled`); the minute's housekeeping is claimed by the
    bench beforehand (`claim_housekeeping`), so it runs inside the window on neither side."""
    slot = datetime.fromtimestamp(boundary, UTC)
    if runs_of_slot(engine, slot):
        raise BenchError(f"runs of {iso(boundary)} exist before it; the beats fired it early")
    claim_housekeeping(engine, slot)
    sleep_until(boundary - 0.2)
    groups = cpu_groups(engine, beats)
    before = CpuSample.take(groups)
    seen = wait_runs(engine, count, slot.isoformat(), boundary + deadline)
    settled = wait_settled(engine, slot, count, len(beats), boundary + deadline)
    after = CpuSample.take(cpu_groups(engine, beats, groups["postgres"]))
    spent = after.since(before)
    per_beat = {
        b.name: after.groups["beats"].get(b.proc.pid, 0.0)
        - before.groups["beats"].get(b.proc.pid, 0.0)
        for b in beats
    }
    for beat in beats:
        beat.check_alive()
    once = check_once(engine, slot)
    first_claim, last_claim = claim_span(engine, slot)
    per_occurrence = (spent["beats"] + spent["postgres"]) * 1000 / count
    label = f"ADE, {len(beats)} beat{'s' if len(beats) > 1 else ''}, {iso(boundary)}"
    result = offsets_result(label, count, queued_offsets(engine, slot), per_occurrence)
    result.notes += [
        f"last run seen by the 50 ms poll at {secs(seen - boundary)}, outcomes and losing claims"
        f" all in at {secs(settled - boundary)} (the CPU window's end); claimed_at from"
        f" {secs(first_claim)} to {secs(last_claim)}",
        f"occurrences by beat: {beat_split(once.by_beat, beats)}; losing claims of the"
        f" {once.shards} shards: {once.shard_losers}; occurrences claimed twice:"
        f" {once.duplicate_claims}",
        cpu_note(spent, count, "occurrence"),
        "CPU of each beat in the window: "
        + ", ".join(
            f"{name} {cpu:.2f} s ({cpu * 1000 / max(1, fired):.3f} ms a slot it fired)"
            for (name, cpu), fired in zip(
                per_beat.items(), beat_counts(once.by_beat, beats), strict=True
            )
        ),
    ]
    return Boundary(result, once, spent["beats"], spent["postgres"], per_beat)


def beat_counts(by_beat: dict[str, int], beats: list[Child]) -> list[int]:
    """How many occurrences each of `beats` won, in their order (by the pid in the beat id)."""
    by_pid = {beat_id.split(":")[1]: n for beat_id, n in by_beat.items() if beat_id.count(":") >= 2}
    return [by_pid.get(str(b.proc.pid), 0) for b in beats]


def bench_ade(
    args: argparse.Namespace,
    engine: Engine,
    database_url: str,
    store: redis.Redis,
    work: Path,
    count_beats: int,
) -> Side:
    """Start `count_beats` beats and measure `1 + args.warmups` boundaries, the last the
    measured one (the first boundary pays each process's first-use costs: every rule's parse
    on first fire, statement caches, connections), then the one-shots if asked."""
    count = args.rules
    env = base_env()
    env["ADE_DATABASE_URL"] = database_url
    env["ADE_BROKER_URL"] = args.redis_url
    env["ADE_PROJECTS__DEFAULT"] = str(work / "project")
    finish_runs(engine)  # an earlier side's runs would make the overlap policy skip these
    store.delete(BUILTIN_QUEUE)
    later = args.warmups * MINUTE
    if args.one_shots:
        ids = [rule_id(index) for index in range(args.one_shots)]
        first, due = beat_once.plan_one_shots(engine, ids, args.start_lead, later)
    else:
        first, due = plan_boundary(args.start_lead), math.nan
    boundaries = [first + n * MINUTE for n in range(1 + args.warmups)]
    print(
        f"  starting {count_beats} beats for the boundaries "
        + ", ".join(iso(b) for b in boundaries)
        + " UTC (the last measured) ...",
        flush=True,
    )
    claims_before = housekeeping_claims(engine)
    beats = start_beats(count_beats, env, work)
    try:
        took = wait_beats_ready(engine, beats, first, claims_before)
        # CPU seconds each beat spent to get there (process start included): what the start
        # costs whatever else the machine is doing, beside the wall-clock figure.
        startup_cpu = [cpu_seconds(b.proc.pid) or math.nan for b in beats]
        print(
            f"  all beats loaded the rules {took:.1f} s after starting (CPU per beat: "
            + ", ".join(f"{cpu:.1f} s" for cpu in startup_cpu)
            + ")",
            flush=True,
        )
        fired = []
        for index, boundary in enumerate(boundaries):
            if index:
                finish_runs(engine)
            fired.append(measure_boundary(engine, beats, count, boundary, args.deadline))
            print(f"  {iso(boundary)}: {fired[-1].cpu_ms:.3f} ms a slot", flush=True)
        one_shots = None
        if args.one_shots:
            print(f"  one-shot case ({args.one_shots} due at {iso(due)} UTC) ...", flush=True)
            one_shots = beat_once.measure_one_shots(
                engine, beats, args.one_shots, due, args.deadline
            )
    finally:
        stop_children(beats)
    measured = fired[-1].result
    measured.startup = took
    measured.notes += [
        "start-up CPU per beat (process start, first refresh, up to the housekeeping claim): "
        + ", ".join(f"{cpu:.2f} s" for cpu in startup_cpu),
        f"messages on {BUILTIN_QUEUE} after the beats stopped: {int(store.llen(BUILTIN_QUEUE))}"
        " (the recovery sweep's re-sends of runs queued over a minute count too)",
    ]
    return Side(count_beats, took, startup_cpu, fired, one_shots)
