"""Beat benchmark: N schedules due in the same minute, ADE's database-claimed beats vs Celery beat.

What it measures, in one run (each side against its own minute boundary, one after the other):

(a) ADE: N rules (`--rules`, default 10,000; up to 200,000), each with one `* * * * *` schedule
    trigger and one built-in `run-command: true` step, written into a scratch PostgreSQL database
    by the sync's own bulk upsert (`sync_file_rules`: rows as `rules sync` writes them, from one
    validated rule copied per id, so 100,000 rules take seconds, not a 100,000-rule YAML sync).
    `--beats` (default 3) real `celery beat -S ade_workers.celery.beat:DatabaseScheduler`
    processes are started `--start-lead` seconds before a minute boundary and must all have
    loaded the rules before it (each has claimed the hourly housekeeping slot, which it does
    right after its first schedule refresh); the seconds from starting them until the last one
    had is reported as the start-up to a loaded schedule (target: under 10 s at 100,000), with
    the CPU seconds each beat spent to get there. No worker runs, so each fired occurrence
    leaves one `queued` run: "queued" means the run row exists (its message is sent to the
    broker right after). Reported: seconds from the boundary to the first and to the
    last run (`runs.queued_at`), p50/p95 of queued_at - boundary, claims/s (N / seconds to the last
    run), how the occurrences split between the beats, the losing claims (the beats split the
    boundary into shards, `ade_tasks.schedule.shards`, and every beat claims every shard: the
    losers' shard claims are counted, and the occurrences claimed twice, 0 when the beats agree on
    the rules), and CPU per occurrence: the beat processes plus the
    PostgreSQL backends of the scratch database (utime + stime from /proc), from just before the
    boundary until the last run was queued. Exactly once: for the boundary's slot there are N queued
    runs of N distinct rules, all keys (rule, slot) are distinct, and N occurrences with outcome
    `fired` point at those runs.
(b) vanilla Celery: a plain Celery app (this module's `app`, `celery -A bench.beat beat`) whose
    `beat_schedule` holds N `crontab()` entries sending `bench.noop` to the queue
    `bench.vanilla`, which nobody consumes, run by one real `celery beat` process with the
    default PersistentScheduler. Time from the boundary until the Redis list `bench.vanilla`
    holds N messages (polled every 50 ms; first/p50/p95 come from the same polls). Celery beat
    sends one entry per tick and compares its whole schedule on every tick, so large N take
    minutes; past `--vanilla-deadline` the figure is reported as a lower bound, extrapolated
    at the observed send rate (raise the deadline to measure it through). `--no-vanilla` skips
    it (at 100,000 entries it sends for hours).
(c) ADE one-shots (`--one-shots`, default 10,000; 0 skips): that many of the rules also get one
    scheduled manual run (`run_at`) due at the same second, 30 s after the boundary of (a), fired
    by the same beats. Timed from `run_at` to `runs.queued_at` (p50/p99) against the cron slot of
    (a) as the baseline, with the ratio; exactly once per scheduled-run id (`bench/beat_once.py`).

Targets (ADE), exactly once: all N queued within 5 s of the boundary up to 10,000 rules and
within 30 s up to 100,000 (issue 18; `boundary_target`); the one-shots within 10 s of their
`run_at`.

The benchmark creates a scratch database `ade_beatbench_<pid>` (dropped at the end), uses Redis
database 11 (flushed before and after) and only talks to loopback services. It waits for up to
two minute boundaries, so it takes about 3-5 minutes. Run it from the repository root:

    .venv/bin/python bench/beat.py [--rules N] [--one-shots N] [--beats 3] [--vanilla-deadline S]

It exits non-zero only when something breaks (a service is down, a beat does not start or dies,
a deadline passes on the ADE side, exactly-once is violated); a missed target is reported as MISS.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as a script: make `bench.*` importable
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.schedules import crontab, schedule
from sqlalchemy import Engine, text

from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.db.rule_sync import sync_file_rules
from ade_tasks.housekeeping import HOUSEKEEPING
from ade_tasks.rules.loader import LoadedRule, content_hash, parse_rule
from ade_tasks.rules.rule import Rule
from ade_workers.celery.app import BUILTIN_QUEUE
from bench import beat_once
from bench.common import (
    BenchError,
    exit_on_sigterm,
    machine_idle_seconds,
    percentile,
    require_loopback,
    require_own_redis_db,
    scratch_database,
    tail,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"

# The vanilla side: read by `celery -A bench.beat beat` from its environment.
ENTRIES_ENV = "BENCH_BEAT_ENTRIES"
BROKER_ENV = "BENCH_BEAT_BROKER_URL"
NOOP_TASK = "bench.noop"
VANILLA_QUEUE = "bench.vanilla"
READY_TASK = "bench.ready"
READY_QUEUE = "bench.vanilla.ready"  # a 1 s entry: its first message says the beat is ticking

TARGET_SECONDS = 10.0  # the one-shots, from their run_at
STARTUP_TARGET_SECONDS = 10.0  # issue 18: 3 beats loading 100,000 rules
MAX_RULES = 200_000
START_LEAD_SECONDS = 25.0  # processes start at least this long before their boundary
READY_MARGIN_SECONDS = 1.0  # and must be ready this long before it
POLL_SECONDS = 0.05
STOP_SECONDS = 15.0


# --- the vanilla Celery app, importable by `celery -A bench.beat beat` ------------------------


def vanilla_app(broker_url: str, entries: int) -> Celery:
    """A plain Celery app whose beat schedule sends `entries` no-op tasks every minute."""
    app = Celery("bench-vanilla", broker=broker_url, set_as_current=False)
    beat_schedule: dict[str, dict[str, Any]] = {
        f"bench-{index:05d}": {
            "task": NOOP_TASK,
            "schedule": crontab(),
            "args": (index,),
            "options": {"queue": VANILLA_QUEUE},
        }
        for index in range(entries)
    }
    beat_schedule["bench-ready"] = {
        "task": READY_TASK,
        "schedule": schedule(timedelta(seconds=1)),
        "options": {"queue": READY_QUEUE},
    }
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=3,
        timezone="UTC",
        enable_utc=True,
        beat_schedule=beat_schedule,
    )
    return app


app: Celery  # declared only: `__getattr__` builds it on first access


def __getattr__(name: str) -> Celery:
    # `celery -A bench.beat` looks up `app`; build it on first access only.
    if name == "app":
        global app
        entries = int(os.environ.get(ENTRIES_ENV, "10000"))
        app = vanilla_app(os.environ.get(BROKER_ENV, DEFAULT_REDIS_URL), entries)
        return app
    raise AttributeError(name)


# --- statistics and results -------------------------------------------------------------------


@dataclass
class Result:
    """One side: seconds from the boundary to the first, median, p95 and last item queued."""

    label: str
    count: int
    first: float
    p50: float
    p95: float
    last: float
    cpu_ms: float  # per item, processes named in `notes`
    complete: bool = True  # False: `last` is an extrapolation past the deadline
    p99: float = math.nan
    startup: float = math.nan  # seconds from starting the process(es) to a loaded schedule
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.count / self.last if self.last > 0 else math.inf


def _s(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds:.2f} s"


# --- processes and CPU ------------------------------------------------------------------------


@dataclass
class Child:
    """A benchmark subprocess in its own session (its pgid is its pid), logging to a file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(
                f"{self.name} exited with status {self.proc.returncode}; its log ends with:\n"
                + tail(self.log)
            )


def start_child(
    name: str, argv: Sequence[str], env: dict[str, str], cwd: Path, logs: Path
) -> Child:
    log_path = logs / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Child(name, proc, log_path)


def stop_children(children: Sequence[Child]) -> None:
    """SIGTERM all, then SIGKILL each one's own process group after a shared deadline."""
    for child in children:
        if child.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        if child.proc.poll() is None:
            print(f"{child.name} ignored SIGTERM for {STOP_SECONDS:g}s; killing it")
        # Started in its own session, so its pgid is its pid: this reaches only what it forked.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=5)


def _cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process, from /proc; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime stime


@dataclass
class CpuSample:
    """CPU seconds of some processes, by group name and pid, at one moment (Linux /proc)."""

    wall: float
    idle: float
    ours: float
    groups: dict[str, dict[int, float]]

    @classmethod
    def take(cls, groups: Mapping[str, Sequence[int]]) -> CpuSample:
        taken = {
            name: {pid: cpu for pid in pids if (cpu := _cpu_seconds(pid)) is not None}
            for name, pids in groups.items()
        }
        return cls(time.monotonic(), machine_idle_seconds(), time.process_time(), taken)

    def since(self, before: CpuSample) -> dict[str, float]:
        """CPU seconds per group between two samples (a process new in this one counts fully),
        then this process (the poller), everything else on the machine, idle, and capacity."""
        spent = {
            name: sum(cpu - before.groups.get(name, {}).get(pid, 0.0) for pid, cpu in pids.items())
            for name, pids in self.groups.items()
        }
        spent["bench poller"] = self.ours - before.ours
        spent["idle"] = self.idle - before.idle
        capacity = (os.cpu_count() or 1) * (self.wall - before.wall)
        spent["other processes"] = capacity - sum(spent.values())
        spent["capacity"] = capacity
        return spent


def cpu_note(spent: dict[str, float], count: int, unit: str) -> str:
    per = 1000 / count
    parts = [f"{name} {spent[name] * per:.2f} ms" for name in spent if name != "capacity"]
    return f"CPU per {unit}: " + ", ".join(parts) + f", of {spent['capacity'] * per:.2f} core-ms"


# --- clock ------------------------------------------------------------------------------------


def sleep_until(moment: float) -> None:
    """Sleep until the epoch time `moment` (bounded: at most one hour)."""
    for _ in range(7200):
        remaining = moment - time.time()
        if remaining <= 0:
            return
        time.sleep(min(remaining, 0.5))


def boundary_target(count: int) -> float:
    """Issue 18's goal for a boundary of `count` rules: 5 s up to 10,000, 30 s above."""
    return 5.0 if count <= 10_000 else 30.0


def plan_boundary(lead: float = START_LEAD_SECONDS) -> float:
    """The minute boundary to measure from, as epoch seconds; processes may start right after.

    Processes started now fire at the next boundary, so when that is less than `lead` away (too
    close for them to start and load), wait until it has passed and use the following one.
    """
    now = time.time()
    boundary = math.floor(now / 60) * 60 + 60
    if boundary - now < lead:
        print(f"  waiting {boundary - now + 0.5:.0f} s for a minute boundary ...", flush=True)
        sleep_until(boundary + 0.5)
        boundary += 60
    return boundary


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%S")


# --- ADE phase --------------------------------------------------------------------------------


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


def base_env() -> dict[str, str]:
    """Our environment without any ADE_* or BENCH_* variable, with the repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADE_", "BENCH_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


_READY = text(
    "SELECT coalesce(max(1 + duplicate_claims), 0) FROM schedule_occurrences"
    " WHERE rule_id = :housekeeping AND cron = 'prune'"
)
_BACKENDS = text(
    "SELECT pid FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
_RUNS_OF_SLOT = "FROM runs WHERE trigger->>'slot' = :slot_text"
_OCCURRENCES_OF_SLOT = "FROM schedule_occurrences WHERE slot = :slot AND rule_id <> :housekeeping"
_SHARDS_OF_SLOT = text(
    "SELECT count(*), coalesce(sum(losers), 0) FROM schedule_shards WHERE slot = :slot"
)


def _scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as connection:
        return connection.execute(text(sql), params).scalar_one()


def wait_beats_ready(engine: Engine, beats: Sequence[Child], boundary: float) -> float:
    """Until every beat has claimed the hourly housekeeping slot (it does so right after its
    first schedule refresh, so it has loaded the rules); returns the seconds it took."""
    started = time.time()
    deadline = boundary - READY_MARGIN_SECONDS
    while True:
        for beat in beats:
            beat.check_alive()
        with engine.connect() as connection:
            claims = connection.execute(_READY, {"housekeeping": HOUSEKEEPING}).scalar_one()
        if claims >= len(beats):
            return time.time() - started
        if time.time() > deadline:
            logs = "\n".join(f"--- {b.name}:\n{tail(b.log, 8)}" for b in beats)
            raise BenchError(
                f"only {claims} of {len(beats)} beats had loaded the rules "
                f"{READY_MARGIN_SECONDS:g}s before the boundary {_iso(boundary)}\n{logs}"
            )
        time.sleep(0.2)


def wait_runs(engine: Engine, count: int, slot: str, deadline: float) -> float:
    """Poll until `count` runs of `slot` exist; returns when that was seen (epoch seconds)."""
    for _ in range(int(3600 / POLL_SECONDS)):
        with engine.connect() as connection:
            total = connection.execute(text("SELECT count(*) FROM runs")).scalar_one()
            # Runs of a later minute count only if the measured one is slower than a minute.
            if total >= count:
                total = connection.execute(
                    text(f"SELECT count(*) {_RUNS_OF_SLOT}"), {"slot_text": slot}
                ).scalar_one()
        if total >= count:
            return time.time()
        if time.time() > deadline:
            raise BenchError(f"only {total} of {count} runs were queued before the deadline")
        time.sleep(POLL_SECONDS)
    raise BenchError("polling for runs did not end")


def wait_settled(engine: Engine, slot: datetime, count: int, beats: int, deadline: float) -> float:
    """Until every occurrence of the slot has its outcome recorded (the beats record a batch's
    outcomes after dispatching all of it); returns when that was seen (epoch seconds). Then a
    few seconds more for every beat to have tried (and lost) the shards it did not win, so the
    count of losing claims is complete."""
    params = {"slot": slot, "housekeeping": HOUSEKEEPING}
    settled_sql = text(
        f"SELECT count(*) FILTER (WHERE outcome <> 'claimed') {_OCCURRENCES_OF_SLOT}"
    )
    settled: float | None = None
    for _ in range(int(3600 / POLL_SECONDS)):
        with engine.connect() as connection:
            recorded = connection.execute(settled_sql, params).scalar_one()
            shards, losers = connection.execute(_SHARDS_OF_SLOT, params).one()
        now = time.time()
        if settled is None and recorded >= count:
            settled = now
        if settled is not None and (losers >= (beats - 1) * shards or now > settled + 5):
            return settled
        if now > deadline:
            if settled is not None:
                return settled
            raise BenchError(f"only {recorded} of {count} outcomes were recorded by the deadline")
        time.sleep(POLL_SECONDS)
    raise BenchError("polling for outcomes did not end")


@dataclass
class OnceCheck:
    """Exactly-once figures for the measured slot."""

    runs: int
    queued: int
    distinct_rules: int
    distinct_keys_all: int
    runs_all: int
    occurrences: int
    fired: int
    linked: int
    duplicate_claims: int
    shards: int
    shard_losers: int
    by_beat: dict[str, int]

    def ok(self, count: int) -> bool:
        return (
            self.runs == self.queued == self.distinct_rules == count
            and self.occurrences == self.fired == count
            and self.linked == count
            and self.distinct_keys_all == self.runs_all
        )

    def describe(self) -> str:
        return (
            f"runs of the slot {self.runs} ({self.queued} queued, {self.distinct_rules} distinct"
            f" rules), all runs "
            f"{self.runs_all} ({self.distinct_keys_all} distinct rule+slot), occurrences "
            f"{self.occurrences} (fired {self.fired}, linked to those runs {self.linked})"
        )


def check_once(engine: Engine, slot: datetime) -> OnceCheck:
    params = {"slot": slot, "slot_text": slot.isoformat(), "housekeeping": HOUSEKEEPING}
    with engine.connect() as connection:

        def one(sql: str) -> Any:
            return connection.execute(text(sql), params).one()

        runs, queued, distinct_rules = one(
            "SELECT count(*), count(*) FILTER (WHERE status = 'queued'), count(DISTINCT rule_id)"
            f" {_RUNS_OF_SLOT}"
        )
        runs_all, keys_all = one(
            "SELECT count(*), count(DISTINCT (rule_id, trigger->>'slot')) FROM runs"
        )
        shards, shard_losers = connection.execute(_SHARDS_OF_SLOT, params).one()
        occurrences, fired, duplicates = one(
            "SELECT count(*), count(*) FILTER (WHERE outcome = 'fired'),"
            f" coalesce(sum(duplicate_claims), 0) {_OCCURRENCES_OF_SLOT}"
        )
        (linked,) = one(
            "SELECT count(*) FROM schedule_occurrences o JOIN runs r ON r.id = o.run_id"
            " AND r.rule_id = o.rule_id AND r.trigger->>'slot' = :slot_text"
            " WHERE o.slot = :slot AND o.rule_id <> :housekeeping"
        )
        by_beat: dict[str, int] = dict(
            connection.execute(
                text(f"SELECT claimed_by, count(*) {_OCCURRENCES_OF_SLOT} GROUP BY claimed_by"),
                params,
            ).all()
        )
    return OnceCheck(
        runs,
        queued,
        distinct_rules,
        keys_all,
        runs_all,
        occurrences,
        fired,
        linked,
        duplicates,
        shards,
        shard_losers,
        by_beat,
    )


def queued_offsets(engine: Engine, slot: datetime) -> list[float]:
    """Seconds from the slot to each of its runs' queued_at."""
    sql = f"SELECT queued_at {_RUNS_OF_SLOT}"
    with engine.connect() as connection:
        rows = connection.execute(text(sql), {"slot_text": slot.isoformat()}).scalars().all()
    return [(value - slot).total_seconds() for value in rows]


def claim_span(engine: Engine, slot: datetime) -> tuple[float, float]:
    """Seconds from the slot to the first and the last claim of its occurrences."""
    sql = f"SELECT min(claimed_at), max(claimed_at) {_OCCURRENCES_OF_SLOT}"
    with engine.connect() as connection:
        first, last = connection.execute(
            text(sql), {"slot": slot, "housekeeping": HOUSEKEEPING}
        ).one()
    return (first - slot).total_seconds(), (last - slot).total_seconds()


def offsets_result(label: str, count: int, offsets: Sequence[float], cpu_ms: float) -> Result:
    """A side's figures from the seconds each item took from due to queued."""
    return Result(
        label,
        count,
        min(offsets),
        percentile(offsets, 50),
        percentile(offsets, 95),
        max(offsets),
        cpu_ms,
        p99=percentile(offsets, 99),
    )


def cpu_groups(
    engine: Engine, beats: Sequence[Child], seen: Sequence[int] = ()
) -> dict[str, list[int]]:
    """The processes whose CPU is counted: the beats, and the scratch database's backends
    (with those `seen` before, which may have exited since)."""
    with engine.connect() as connection:
        backends = sorted({*seen, *connection.execute(_BACKENDS).scalars()})
    return {"beats": [b.proc.pid for b in beats], "postgres": backends}


def beat_split(by_beat: Mapping[str, int], beats: Sequence[Child]) -> str:
    """How many items each beat won, by the beats' names."""
    return ", ".join(f"{_beat_label(beat_id, beats)} {n}" for beat_id, n in sorted(by_beat.items()))


def _beat_label(beat_id: str, beats: Sequence[Child]) -> str:
    pid = beat_id.split(":")[1] if beat_id.count(":") >= 2 else ""
    for child in beats:
        if str(child.proc.pid) == pid:
            return child.name
    return beat_id


@dataclass
class OneShots:
    """The one-shot case: its figures, its exactly-once check, and when they were due."""

    result: Result
    check: beat_once.OneShotCheck
    due: float


def plan_one_shots(engine: Engine, count: int, lead: float) -> tuple[float, float]:
    """Plan the boundary with room to store `count` one-shots due `ONCE_AFTER_SECONDS` after
    it, and store them; returns (boundary, due) as epoch seconds."""
    boundary = plan_boundary(lead + beat_once.STORE_BUDGET_SECONDS)
    due = boundary + beat_once.ONCE_AFTER_SECONDS
    ids = [rule_id(index) for index in range(count)]
    took = beat_once.store_one_shots(engine, ids, datetime.fromtimestamp(due, UTC))
    print(f"  stored {count} one-shots due at {_iso(due)} UTC in {took:.1f} s", flush=True)
    if boundary - time.time() < lead:
        raise BenchError(
            f"storing {count} one-shots took {took:.1f} s, more than the"
            f" {beat_once.STORE_BUDGET_SECONDS:g} s planned; the beats cannot start in time"
        )
    return boundary, due


def measure_one_shots(
    engine: Engine, beats: Sequence[Child], count: int, due: float, deadline: float
) -> OneShots:
    """Time the one-shots due at `due` (epoch seconds) from their run_at to queued."""

    def check_alive() -> None:
        for beat in beats:
            beat.check_alive()

    if time.time() > due - 1:
        raise BenchError(
            f"the cron slot had not settled {beat_once.ONCE_AFTER_SECONDS - 1} s after its"
            " boundary, so the one-shots would share the beats with it"
        )
    sleep_until(due - 0.2)
    groups = cpu_groups(engine, beats)
    before = CpuSample.take(groups)
    seen = beat_once.wait_queued(engine, count, due + deadline, check_alive)
    spent = CpuSample.take(cpu_groups(engine, beats, groups["postgres"])).since(before)
    settled = beat_once.wait_settled(engine, count, due + deadline)
    check_alive()
    check = beat_once.check_one_shots(engine)
    offsets = beat_once.queued_offsets(engine)
    if not offsets:
        raise BenchError("no one-shot run is linked to its scheduled run")
    first_claim, last_claim = beat_once.claim_span(engine, datetime.fromtimestamp(due, UTC))
    cpu_ms = (spent["beats"] + spent["postgres"]) * 1000 / count
    result = offsets_result(f"ADE one-shots, {len(beats)} beats", count, offsets, cpu_ms)
    result.notes += [
        f"due {_iso(due)} UTC; last run seen by the 50 ms poll at {_s(seen - due)}, all"
        f" settled at {_s(settled - due)}; claimed_at from {_s(first_claim)} to {_s(last_claim)}",
        f"scheduled runs by beat: {beat_split(check.by_beat, beats)}",
        cpu_note(spent, count, "one-shot"),
    ]
    return OneShots(result, check, due)


def bench_ade(
    args: argparse.Namespace, engine: Engine, database_url: str, store: redis.Redis, work: Path
) -> tuple[Result, OnceCheck, OneShots | None]:
    count = args.rules
    env = base_env()
    env["ADE_DATABASE_URL"] = database_url
    env["ADE_BROKER_URL"] = args.redis_url
    env["ADE_PROJECTS__DEFAULT"] = str(work / "project")
    if args.one_shots:
        boundary, due = plan_one_shots(engine, args.one_shots, args.start_lead)
    else:
        boundary, due = plan_boundary(args.start_lead), math.nan
    slot = datetime.fromtimestamp(boundary, UTC)
    print(f"  starting {args.beats} beats for the boundary {_iso(boundary)} UTC ...", flush=True)
    beats: list[Child] = []
    try:
        for index in range(args.beats):
            argv = [
                sys.executable, "-m", "celery", "-A", "ade_workers.celery.app", "beat",
                "-S", "ade_workers.celery.beat:DatabaseScheduler", "--loglevel", "WARNING",
                "-s", str(work / f"beat-{index}.schedule"),
            ]  # fmt: skip
            beats.append(start_child(f"beat-{index}", argv, env, work, work))
        took = wait_beats_ready(engine, beats, boundary)
        # CPU seconds each beat spent to get there (process start included): what the start
        # costs whatever else the machine is doing, beside the wall-clock figure.
        startup_cpu = [_cpu_seconds(b.proc.pid) or math.nan for b in beats]
        print(
            f"  all beats loaded the rules {took:.1f} s after starting (CPU per beat: "
            + ", ".join(f"{cpu:.1f} s" for cpu in startup_cpu)
            + ")",
            flush=True,
        )
        if _scalar(engine, "SELECT count(*) FROM runs"):
            raise BenchError("runs exist before the boundary; the beats fired an earlier minute")
        sleep_until(boundary - 0.2)
        groups = cpu_groups(engine, beats)
        before = CpuSample.take(groups)
        seen = wait_runs(engine, count, slot.isoformat(), boundary + args.deadline)
        after = CpuSample.take(cpu_groups(engine, beats, groups["postgres"]))
        spent = after.since(before)
        beat_cpu = {
            b.name: after.groups["beats"].get(b.proc.pid, 0.0)
            - before.groups["beats"].get(b.proc.pid, 0.0)
            for b in beats
        }
        settled = wait_settled(engine, slot, count, args.beats, boundary + args.deadline)
        for beat in beats:
            beat.check_alive()
        once = check_once(engine, slot)
        offsets = queued_offsets(engine, slot)
        first_claim, last_claim = claim_span(engine, slot)
        one_shots = None
        if args.one_shots:
            print(f"  one-shot case ({args.one_shots} due at {_iso(due)} UTC) ...", flush=True)
            one_shots = measure_one_shots(engine, beats, args.one_shots, due, args.deadline)
    finally:
        stop_children(beats)
    sent = int(store.llen(BUILTIN_QUEUE))
    per_occurrence = (spent["beats"] + spent["postgres"]) * 1000 / count
    result = offsets_result(
        f"ADE, {args.beats} DatabaseScheduler beats", count, offsets, per_occurrence
    )
    result.startup = took
    result.notes.append(
        "start-up CPU per beat (process start, first refresh, up to the housekeeping claim): "
        + ", ".join(f"{cpu:.2f} s" for cpu in startup_cpu)
    )
    result.notes += [
        f"last run seen by the 50 ms poll at {_s(seen - boundary)}, all outcomes recorded at"
        f" {_s(settled - boundary)}; claimed_at from {_s(first_claim)} to {_s(last_claim)}",
        f"occurrences by beat: {beat_split(once.by_beat, beats)}; losing claims of the"
        f" {once.shards} shards: {once.shard_losers}; occurrences claimed twice:"
        f" {once.duplicate_claims}",
        f"messages on {BUILTIN_QUEUE} after the beats stopped: {sent} (the recovery sweep's"
        " re-sends of runs queued over a minute count too)",
        cpu_note(spent, count, "occurrence"),
        "CPU of each beat from the boundary to the last run queued: "
        + ", ".join(f"{name} {cpu:.2f} s" for name, cpu in beat_cpu.items()),
    ]
    return result, once, one_shots


# --- vanilla Celery phase ---------------------------------------------------------------------


def wait_vanilla_ready(store: redis.Redis, beat: Child, boundary: float) -> float:
    started = time.time()
    while not store.llen(READY_QUEUE):
        beat.check_alive()
        if time.time() > boundary - READY_MARGIN_SECONDS:
            raise BenchError(
                f"Celery beat was not ticking {READY_MARGIN_SECONDS:g}s before the boundary "
                f"{_iso(boundary)}; its log ends with:\n{tail(beat.log)}"
            )
        time.sleep(0.2)
    return time.time() - started


def _crossing(samples: Sequence[tuple[float, int]], level: float) -> float:
    """When the sampled count first reached `level` (linear between samples)."""
    previous = (samples[0][0], 0)
    for at, value in samples:
        if value >= level:
            t0, v0 = previous
            return at if value == v0 else t0 + (at - t0) * (level - v0) / (value - v0)
        previous = (at, value)
    return math.nan


def bench_vanilla(args: argparse.Namespace, store: redis.Redis, work: Path) -> Result:
    count = args.rules
    env = base_env()
    env[ENTRIES_ENV] = str(count)
    env[BROKER_ENV] = args.redis_url
    store.delete(VANILLA_QUEUE, READY_QUEUE)
    boundary = plan_boundary(args.start_lead)
    print(f"  starting Celery beat for the boundary {_iso(boundary)} UTC ...", flush=True)
    argv = [
        sys.executable, "-m", "celery", "-A", "bench.beat", "beat", "--loglevel", "WARNING",
        "-s", str(work / "vanilla.schedule"),
    ]  # fmt: skip
    beat = start_child("celery-beat", argv, env, REPO_ROOT, work)
    try:
        took = wait_vanilla_ready(store, beat, boundary)
        print(f"  Celery beat ticking {took:.1f} s after starting", flush=True)
        if store.llen(VANILLA_QUEUE):
            raise BenchError("tasks were sent before the boundary; Celery beat fired too early")
        sleep_until(boundary - 0.2)
        before = CpuSample.take({"beat": [beat.proc.pid]})
        samples: list[tuple[float, int]] = [(boundary, 0)]
        deadline = boundary + args.vanilla_deadline
        for _ in range(int(3600 / POLL_SECONDS)):
            sent = int(store.llen(VANILLA_QUEUE))
            samples.append((time.time() - boundary, sent))
            if sent >= count or time.time() > deadline:
                break
            time.sleep(POLL_SECONDS)
        samples[0] = (0.0, 0)
        spent = CpuSample.take({"beat": [beat.proc.pid]}).since(before)
        beat.check_alive()
    finally:
        stop_children([beat])
    at, sent = samples[-1]
    complete = sent >= count
    if not sent:
        raise BenchError(f"Celery beat sent nothing within {args.vanilla_deadline:g}s")
    first = _crossing(samples, 1)
    rate = (sent - 1) / (at - first) if sent > 1 and at > first else math.nan
    last = _crossing(samples, count) if complete else first + (count - 1) / rate
    result = Result(
        "vanilla Celery beat (PersistentScheduler)",
        count,
        first,
        _crossing(samples, count * 0.5) if sent >= count * 0.5 else math.nan,
        _crossing(samples, count * 0.95) if sent >= count * 0.95 else math.nan,
        last,
        spent["beat"] * 1000 / sent,
        complete=complete,
        startup=took,
    )
    if not complete:
        result.notes.append(
            f"deadline {args.vanilla_deadline:g} s passed with {sent} of {count} sent "
            f"({rate:.0f}/s): the last is extrapolated; --vanilla-deadline to measure it"
        )
    result.notes.append(cpu_note(spent, sent, "task sent"))
    return result


# --- setup, report, main ----------------------------------------------------------------------


def prepare_rules(engine: Engine, work: Path, count: int) -> None:
    """Write the bench's rules the way `rules sync` writes them: its bulk upsert
    (`sync_file_rules`, one transaction), from rules loaded in memory (`bench_rules`)."""
    (work / "project").mkdir()
    with create_session_factory(engine).begin() as session:
        report = sync_file_rules(session, bench_rules(count), remove_missing=True)
    if len(report.added) != count:
        raise BenchError(f"the sync added {len(report.added)} of {count} bench rules")


def run(args: argparse.Namespace) -> tuple[Result, OnceCheck, OneShots | None, Result | None]:
    require_loopback(args.admin_url, "--admin-url")
    require_loopback(args.redis_url, "--redis-url")
    store = redis.Redis.from_url(args.redis_url)
    try:
        store.flushdb()
    except redis.RedisError as exc:
        raise BenchError(f"Redis at {args.redis_url} is not usable: {exc}") from exc
    try:
        with (
            tempfile.TemporaryDirectory(prefix="ade-beatbench-") as tmp,
            scratch_database(args.admin_url, "ade_beatbench") as database_url,
        ):
            work = Path(tmp)
            engine = create_db_engine(database_url)
            try:
                upgrade(engine)
                started = time.monotonic()
                prepare_rules(engine, work, args.rules)
                print(
                    f"wrote {args.rules} rules in {time.monotonic() - started:.1f} s (the sync's"
                    " bulk upsert of rules loaded in memory)"
                )
                print(f"ADE phase ({args.rules} rules, {args.beats} beats) ...", flush=True)
                ade, once, one_shots = bench_ade(args, engine, database_url, store, work)
            finally:
                engine.dispose()
            vanilla = None
            if not args.no_vanilla:
                print(f"vanilla Celery phase ({args.rules} entries) ...", flush=True)
                vanilla = bench_vanilla(args, store, work)
    finally:
        with contextlib.suppress(redis.RedisError):
            store.flushdb()
        store.close()
    return ade, once, one_shots, vanilla


def report(
    ade: Result, once: OnceCheck, one_shots: OneShots | None, vanilla: Result | None
) -> None:
    print()
    print(f"{'seconds from the minute boundary':42} {'first':>8} {'p50':>8} {'p95':>8} {'all':>9}")
    print(f"{'':42} {'':>8} {'':>8} {'':>8} {'queued':>9} items/s   CPU/item")
    shot = [] if one_shots is None else [one_shots.result]
    for result in (ade, *shot, *([] if vanilla is None else [vanilla])):
        last = _s(result.last) if result.complete else f">{result.last:.0f} s"
        print(
            f"{result.label:42} {_s(result.first):>8} {_s(result.p50):>8} {_s(result.p95):>8}"
            f" {last:>9} {result.rate:7.0f} {result.cpu_ms:7.2f} ms"
        )
        for note in result.notes:
            print(f"{'':4}{note}")
    print(
        "items: ADE occurrences (claims/s = N / seconds to all queued; CPU = beats + PostgreSQL"
        " backends), ADE one-shots from their run_at (likewise), vanilla tasks sent (CPU = the"
        " beat process)"
    )
    print()
    report_startup(ade, vanilla)
    if vanilla is not None:
        approx = "" if vanilla.complete else "~"
        print(f"ratio ADE / vanilla, time to all queued = {approx}{ade.last / vanilla.last:.2f}")
    else:
        print("vanilla Celery beat: skipped (--no-vanilla)")
    target = boundary_target(ade.count)
    verdict = "PASS" if ade.last <= target else "MISS"
    within = f"within {target:g} s of the boundary"
    print(f"ADE: all {ade.count} queued {within}: {_s(ade.last)}  {verdict}")
    verdict = "PASS" if once.ok(ade.count) else "FAIL"
    print(f"ADE: exactly once: {once.describe()}  {verdict}")
    if one_shots is not None:
        report_one_shots(ade, one_shots)


def report_startup(ade: Result, vanilla: Result | None) -> None:
    """Seconds from starting the processes to a loaded schedule: ADE's beats to their first
    refresh done (each has claimed the housekeeping slot), Celery beat to its first tick."""
    line = f"start-up to a loaded schedule of {ade.count}: {ade.label} {_s(ade.startup)}"
    if vanilla is not None:
        line += f", {vanilla.label} {_s(vanilla.startup)}"
    print(line)
    verdict = "PASS" if ade.startup <= STARTUP_TARGET_SECONDS else "MISS"
    print(
        f"ADE: {ade.count} rules loaded by every beat within {STARTUP_TARGET_SECONDS:g} s of"
        f" starting: {_s(ade.startup)}  {verdict}"
    )


def report_one_shots(cron: Result, one_shots: OneShots) -> None:
    """The one-shots against the cron slot of the same run, due -> queued."""
    shot = one_shots.result
    print()
    print(f"{'seconds from due to queued':42} {'p50':>8} {'p99':>8} {'all':>8}")
    for label, result in (("cron slot (baseline)", cron), ("one-shots", shot)):
        label = f"{label}, {result.count}"
        print(f"{label:42} {_s(result.p50):>8} {_s(result.p99):>8} {_s(result.last):>8}")
    ratios = [shot.p50 / cron.p50, shot.p99 / cron.p99, shot.last / cron.last]
    print(f"{'ratio one-shot / cron':42} " + " ".join(f"{r:8.2f}" for r in ratios))
    verdict = "PASS" if shot.last <= TARGET_SECONDS else "MISS"
    print(
        f"ADE: all {shot.count} one-shots queued within {TARGET_SECONDS:g} s of their run_at:"
        f" {_s(shot.last)}  {verdict}"
    )
    verdict = "PASS" if one_shots.check.ok(shot.count) else "FAIL"
    print(f"ADE: one-shots exactly once: {one_shots.check.describe()}  {verdict}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rules", type=int, default=10_000, help="rules / beat entries due")
    parser.add_argument(
        "--one-shots", type=int, default=10_000, help="one-shots due in one second (0: none)"
    )
    parser.add_argument("--beats", type=int, default=3, help="ADE beat processes")
    parser.add_argument(
        "--deadline", type=float, default=120.0, help="ADE: seconds after the boundary"
    )
    parser.add_argument(
        "--vanilla-deadline",
        type=float,
        default=60.0,
        help="Celery beat: seconds after the boundary, then extrapolate",
    )
    parser.add_argument(
        "--start-lead",
        type=float,
        default=None,
        help="seconds the processes get to start before their boundary (default: 25, and 60"
        " above 20,000 rules)",
    )
    parser.add_argument(
        "--no-vanilla", action="store_true", help="skip vanilla Celery beat (slow at large N)"
    )
    parser.add_argument("--admin-url", default=DEFAULT_ADMIN_URL, help="PostgreSQL admin URL")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="broker (flushed!)")
    args = parser.parse_args(argv)
    if args.rules < 1 or args.rules > MAX_RULES or args.beats < 1:
        parser.error(f"need 1 <= --rules <= {MAX_RULES} and --beats >= 1")
    if args.start_lead is None:
        args.start_lead = START_LEAD_SECONDS if args.rules <= 20_000 else 60.0
    if not 5 <= args.start_lead <= 600:
        parser.error("need 5 <= --start-lead <= 600")
    if not 0 <= args.one_shots <= args.rules:
        parser.error("need 0 <= --one-shots <= --rules (one per rule)")
    if not 0 < args.deadline <= 600 or not 0 < args.vanilla_deadline <= 3000:
        parser.error("need 0 < --deadline <= 600 and 0 < --vanilla-deadline <= 3000")
    try:
        require_own_redis_db(args.redis_url, "bench/beat.py")
    except BenchError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        ade, once, one_shots, vanilla = run(args)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    report(ade, once, one_shots, vanilla)
    shots_ok = one_shots is None or one_shots.check.ok(one_shots.result.count)
    return 0 if once.ok(ade.count) and shots_ok else 1


if __name__ == "__main__":
    sys.exit(main())
