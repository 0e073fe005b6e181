"""Dispatch benchmark: ADE runs against raw Celery tasks on the same broker, pool and config.

Two real prefork workers (2 processes each, `--concurrency`) run side by side, both built by
`create_celery_app`, so broker, prefetch, acks_late and the rest of the reliable configuration
are identical:

(a) raw Celery: `celery -A bench.dispatch worker` on the queue `bench.raw`, running a no-op task
    and a task that runs the `true` subprocess, sent by name from this process. The app has no
    result backend, so each task records its finish time (`time.time()`) into a Redis list in
    the benchmark's Redis database; latency is that time minus the send time.
(b) ADE: `celery -A bench.dispatch:ade_app worker` on `ade.builtin`, ADE's own worker app with
    one addition: after each run's task returns it pushes the run id to a Redis list, so the
    bench waits on ADE's runs as it waits on the raw tasks (a blocking pop) instead of polling
    PostgreSQL while the run goes. Runs of the rule `bench-true` (one built-in step,
    `run-command: [true]`) are created with `ade_tasks.runs.dispatch.dispatch` from this process;
    latency is the run's `finished_at` minus the time of the `dispatch()` call.

The raw side is Celery as shipped: its app and worker use kombu's own Redis transport, where ADE's
use `ade_workers.celery.redis_transport` (one Redis client per channel instead of one built for
every publish and ack, which ADE's app configures). `--raw-transport ade` gives the raw side
ADE's transport too, for the like-for-like ratio of ADE's own work to Celery's.

The sides take turns (`measure`), so that the machine's drift reaches all of them alike.
Throughput: `--rounds` rounds of one burst a side of `--n` tasks/runs sent as fast as one thread
can, each from the first send to the last finish; a side's throughput is all its items over all
its bursts' time, and the report gives each round's ratio too. Latency: `--latency-n` round trips
a side, split between the rounds, each share right after the side's burst; a round trip is sent
only after the previous one finished, so it is not queueing time; p50 and p95 are reported.

The durable commits' floor: once both workers have stopped, one-row INSERTs on the scratch
database are timed, each after a short quiet stretch and back to back. An ADE run's path holds
everything raw Celery's `true` task does plus two such commits (the run's INSERT before the send,
the claim before the step), so raw `true`'s p50 plus two of them is a floor under ADE's p50; the
report prints it against the p50 target, and how far ADE's p50 sits above it.

The benchmark creates a scratch database `ade_bench_<pid>` (dropped at the end), uses Redis
database 12 (flushed before and after) and only talks to loopback services. Run it from the
repository root:

    make bench                      # = .venv/bin/python bench/dispatch.py
    .venv/bin/python bench/dispatch.py --n 500 --rounds 5 --latency-n 100

It exits non-zero only when something breaks (a service is down, a worker does not start, a run
fails, the deadline passes); a missed target is reported as MISS, not as an error.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (
    None,
    "",
):  # run as `python bench/dispatch.py`: import `bench.*` from the repository
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import importlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import redis
from celery import Celery, signals
from sqlalchemy import Engine, bindparam, text

from ade_tasks.clock import utcnow
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.db.partitions import create_months, month_start
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings, get_settings
from ade_workers.celery.app import BUILTIN_QUEUE, EXECUTE_TASK, CelerySender, create_celery_app
from ade_workers.containment.process import group_alive
from bench.common import (
    BenchError,
    exit_on_sigterm,
    machine_idle_seconds,
    percentile,
    require_loopback,
    scratch_database,
    tail,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/12"

NOOP_TASK = "bench.noop"
TRUE_TASK = "bench.true_subprocess"
RULE_ID = "bench-true"
RULE_YAML = """\
id: bench-true
name: Benchmark the run path
description: One step that runs `true`; used by bench/dispatch.py.
triggers:
  - type: manual
execution:
  kind: built-in
  actions:
    - id: t
      type: run-command
      command: ["true"]
"""

WORKER_START_SECONDS = 60.0
WORKER_STOP_SECONDS = 20.0
#: The raw worker's queue; the ADE worker consumes ADE's own (`ade.builtin`) beside it.
RAW_QUEUE = "bench.raw"
#: "ade" gives the raw worker and sender ADE's Redis transport, not kombu's (`--raw-transport`).
RAW_TRANSPORT_ENV = "BENCH_RAW_TRANSPORT"
#: Where the ADE worker's app pushes the id of each run it finished (`ade_worker_app`).
ADE_FINISHED_KEY = "bench:ade:finished"
#: Quiet before each side's turn, for the previous side's tail to settle.
SWITCH_PAUSE_SECONDS = 0.05
#: Quiet before each probed commit: about the stretch before a run's claim in the latency loop
#: (from its dispatch's return: the send, the broker, the hand-off to a pool process).
PROBE_GAP_SECONDS = 0.002
TARGET_THROUGHPUT_RATIO = 0.5
TARGET_P50_RATIO = 3.0


# --- the two workers' apps, importable by `celery -A bench.dispatch[:ade_app] worker` -----------

_recorder_lock = threading.Lock()
_recorder_client: tuple[int, redis.Redis] | None = None


def _recorder(url: str) -> redis.Redis:
    """This process's Redis client (rebuilt after a fork, like ADE's database engine)."""
    global _recorder_client
    with _recorder_lock:
        if _recorder_client is None or _recorder_client[0] != os.getpid():
            _recorder_client = (os.getpid(), redis.Redis.from_url(url))
        return _recorder_client[1]


def _record_finish(url: str, key: str, seq: int) -> None:
    _recorder(url).rpush(key, f"{seq} {time.time()!r}")


def baseline_app(settings: Settings | None = None, *, ade_transport: bool | None = None) -> Celery:
    """ADE's Celery app (same reliable config) plus the two baseline tasks, consumed from a
    queue of their own (`RAW_QUEUE`) so that the raw worker and the ADE worker run side by side.

    Its broker transport is kombu's own Redis transport, as raw Celery has it, unless
    `ade_transport` (default: `RAW_TRANSPORT_ENV` set to "ade", which `--raw-transport ade`
    passes to the raw worker) gives it ADE's (`ade_workers.celery.redis_transport`)."""
    settings = settings or get_settings()
    app = create_celery_app(settings, extra_queues=(RAW_QUEUE,))
    if ade_transport is None:
        ade_transport = os.environ.get(RAW_TRANSPORT_ENV) == "ade"
    if not ade_transport:
        app.conf.broker_transport = None
    url = settings.broker_url

    @app.task(name=NOOP_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
    def noop(key: str, seq: int) -> None:
        _record_finish(url, key, seq)

    @app.task(name=TRUE_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
    def true_subprocess(key: str, seq: int) -> None:
        subprocess.run(["true"], check=True)
        _record_finish(url, key, seq)

    return app


def ade_worker_app() -> Celery:
    """ADE's own worker app (`ade_workers.celery.app`, settings from the environment) with one
    addition: after each run's task returns, its run id goes to `ADE_FINISHED_KEY` in the
    broker's Redis database. The bench waits on that list as it waits on the raw tasks' records
    (a blocking pop) instead of polling PostgreSQL while the run goes: a poll every few
    milliseconds competed with the run for the machine's two cores and started the next trip
    up to a poll later than raw Celery's loop does (0.5-0.8 ms on a 6 ms p50, 2026-12-06). The
    push comes after the run's outcome is stamped, so it is not in the measured latency."""
    url = get_settings().broker_url

    def record(task: Any = None, args: Sequence[Any] | None = None, **_: Any) -> None:
        if task is not None and task.name == EXECUTE_TASK and args:
            _recorder(url).rpush(ADE_FINISHED_KEY, str(args[0]))

    signals.task_postrun.connect(record, weak=False, dispatch_uid="bench.dispatch.ade_finished")
    app: Celery = importlib.import_module("ade_workers.celery.app").app
    return app


app: Celery  # declared only: `__getattr__` builds it on first access
ade_app: Celery  # likewise


def __getattr__(name: str) -> Celery:
    # `celery -A bench.dispatch` looks up `app`, `-A bench.dispatch:ade_app` the ADE worker's.
    global app, ade_app
    if name == "app":
        app = baseline_app()
        return app
    if name == "ade_app":
        ade_app = ade_worker_app()
        return ade_app
    raise AttributeError(name)


# --- statistics and results -------------------------------------------------------------------


@dataclass
class Result:
    """One side of the comparison: its throughput bursts (count, seconds) and its sequential
    latencies (seconds)."""

    label: str
    unit: str
    bursts: list[tuple[int, float]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Throughput over all bursts: their items over their time."""
        seconds = sum(s for _, s in self.bursts)
        return sum(c for c, _ in self.bursts) / seconds if seconds > 0 else math.inf

    @property
    def round_rates(self) -> list[float]:
        return [count / seconds if seconds > 0 else math.inf for count, seconds in self.bursts]

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p95(self) -> float:
        return percentile(self.latencies, 95)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


# --- workers ----------------------------------------------------------------------------------


def _wait_ready(control: Celery, name: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + WORKER_START_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(
                f"worker {name} exited with status {proc.returncode}; its log ends with:\n"
                + tail(log_path)
            )
        if control.control.ping(destination=[name], timeout=1):
            return
    raise BenchError(
        f"worker {name} did not answer a ping within {WORKER_START_SECONDS:g}s; "
        f"its log ends with:\n{tail(log_path)}"
    )


def _group_cpu_seconds(pgid: int) -> float:
    """CPU time (user + system, including reaped children) of a process group, from /proc."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields[0] is stat's 3rd field (state); [2] is pgrp
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


@dataclass
class CpuMeter:
    """Where the CPU went during a side's bursts: this process, the side's worker (its process
    group), the rest (PostgreSQL, Redis, the other side's idle worker), idle; summed over the
    bursts `measuring` wraps.

    Linux only (/proc); the other sessions on the machine land in "other processes".
    """

    worker_pgid: int
    totals: list[float] = field(default_factory=lambda: [0.0] * 4)  # wall, ours, worker, idle

    def _now(self) -> tuple[float, ...]:
        return (
            time.monotonic(),
            time.process_time(),
            _group_cpu_seconds(self.worker_pgid),
            machine_idle_seconds(),
        )

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        before = self._now()
        yield
        for index, (start, end) in enumerate(zip(before, self._now(), strict=True)):
            self.totals[index] += end - start

    def note(self, count: int, unit: str) -> str:
        wall, ours, worker, idle = self.totals
        capacity = (os.cpu_count() or 1) * wall
        other = capacity - ours - worker - idle
        per = 1000 / count
        return (
            f"CPU per {unit} in the bursts: sender process {ours * per:.1f} ms, worker "
            f"{worker * per:.1f} ms, other processes (PostgreSQL, Redis, ...) {other * per:.1f} "
            f"ms, idle {idle * per:.1f} ms, of {capacity * per:.1f} core-ms"
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (warm shutdown), then SIGKILL the worker's own process group after a deadline."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=WORKER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            print(f"worker {proc.pid} ignored SIGTERM for {WORKER_STOP_SECONDS:g}s; killing it")
    # The worker was started in its own session, so its pgid is its pid: this reaches the pool
    # processes it forked and nothing else.
    if group_alive(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@contextlib.contextmanager
def running_worker(
    module: str, queue: str, env: dict[str, str], control: Celery, log_dir: Path, concurrency: int
) -> Iterator[int]:
    """A real prefork worker of the app `module` names, consuming `queue`, up and answering pings.

    Yields its pid, which is also the id of the process group holding its pool processes.
    """
    name = f"bench-{uuid.uuid4().hex[:12]}@localhost"
    log_path = log_dir / f"{name.partition('@')[0]}.log"
    argv = [
        sys.executable, "-m", "celery", "-A", module, "worker",
        "-Q", queue, "-P", "prefork", "-c", str(concurrency),
        "--without-mingle", "--without-gossip", "-n", name, "--loglevel=WARNING",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_ready(control, name, proc, log_path)
        yield proc.pid
        if proc.poll() is not None:
            raise BenchError(f"worker {name} died during the benchmark:\n{tail(log_path)}")
    finally:
        _stop(proc)


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment of a worker: ours without any ADE_* variable, plus the bench's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADE_")}
    env["ADE_DATABASE_URL"] = settings.database_url
    env["ADE_BROKER_URL"] = settings.broker_url
    env["ADE_PROJECTS__DEFAULT"] = str(settings.projects["default"])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


# --- the two sides: a burst (throughput) and a round trip (latency) each ----------------------


def _check_deadline(deadline: float, doing: str) -> None:
    if time.monotonic() > deadline:
        raise BenchError(f"the deadline passed while {doing}; see --timeout")


def _pop(store: redis.Redis, key: str, count: int, deadline: float, doing: str) -> list[str]:
    """Pop `count` records from the list `key`, waiting for them (a blocking pop, no polling)."""
    records: list[str] = []
    while len(records) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BenchError(f"only {len(records)} of {count} finished while {doing}")
        item = store.blpop([key], timeout=min(remaining, 1.0))
        if item is not None:
            record = item[1]
            records.append(record.decode() if isinstance(record, bytes) else record)
    return records


class RawSide:
    """A baseline task sent by name to the raw worker; each task records its finish time."""

    def __init__(
        self, app: Celery, store: redis.Redis, task: str, label: str, worker_pgid: int
    ) -> None:
        self.app, self.store, self.task = app, store, task
        self.result = Result(label, "tasks")
        self.meter = CpuMeter(worker_pgid)

    def _send(self, key: str, seq: int) -> None:
        self.app.send_task(self.task, args=[key, seq], queue=RAW_QUEUE)

    def _finished(self, key: str, count: int, deadline: float) -> dict[int, float]:
        """sequence number -> finish time (epoch seconds) of `count` tasks recorded at `key`."""
        records = _pop(self.store, key, count, deadline, f"running {self.task}")
        return {int(seq): float(stamp) for seq, stamp in (r.split() for r in records)}

    def burst(self, count: int, deadline: float, *, measured: bool = True) -> None:
        """Send `count` tasks back to back; measured: from the first send to the last finish."""
        key = f"bench:{self.task}:burst:{uuid.uuid4().hex}"
        with self.meter.measuring() if measured else contextlib.nullcontext():
            started = time.time()
            for seq in range(count):
                _check_deadline(deadline, "sending a burst")
                self._send(key, seq)
            finished = self._finished(key, count, deadline)
        if measured:
            self.result.bursts.append((count, max(finished.values()) - started))

    def trip(self, deadline: float) -> None:
        """One task, sent when nothing else is in flight: send -> finished."""
        key = f"bench:{self.task}:trip:{uuid.uuid4().hex}"
        sent = time.time()
        self._send(key, 0)
        self.result.latencies.append(self._finished(key, 1, deadline)[0] - sent)

    def finish(self, deadline: float) -> Result:
        del deadline  # every figure is in already
        self.result.notes.append(self.meter.note(sum(c for c, _ in self.result.bursts), "task"))
        return self.result


def _epoch(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def _check_outcomes(engine: Engine, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The timestamps of the runs (and of their step); BenchError if any did not succeed."""
    query = text(
        "SELECT r.id, r.status, r.error, r.queued_at, r.started_at, r.finished_at,"
        " s.started_at AS step_started_at, s.finished_at AS step_finished_at"
        " FROM runs r LEFT JOIN run_steps s ON s.run_id = r.id AND s.index = 0"
        " WHERE r.id IN :ids"
    ).bindparams(bindparam("ids", expanding=True))
    with engine.connect() as connection:
        rows = {row.id: row._asdict() for row in connection.execute(query, {"ids": list(ids)})}
    bad = [row for row in rows.values() if row["status"] != "succeeded"]
    if bad or len(rows) != len(ids):
        sample = "; ".join(f"{row['id']}: {row['status']} ({row['error']})" for row in bad[:3])
        raise BenchError(f"{len(bad)} of {len(ids)} ADE runs did not succeed: {sample}")
    return rows


class AdeSide:
    """Runs of the rule `bench-true`, created by `dispatch()` here and executed by the ADE
    worker, whose app pushes each finished run's id (`ade_worker_app`). Times come from the
    runs' rows: trigger -> `finished_at`."""

    def __init__(
        self,
        engine: Engine,
        session_factory: SessionFactory,
        sender: CelerySender,
        store: redis.Redis,
        worker_pgid: int,
    ) -> None:
        self.engine, self.session_factory, self.sender, self.store = (
            engine, session_factory, sender, store,
        )  # fmt: skip
        self.result = Result("ADE run-command true", "runs")
        self.meter = CpuMeter(worker_pgid)
        self.dispatching = 0.0  # seconds the bursts spent in dispatch() calls
        self.trips: dict[str, tuple[float, float]] = {}  # run id -> (dispatch called, returned)

    def _dispatch(self) -> str:
        result = dispatch(
            self.session_factory, self.sender, RULE_ID, TriggerEvent.manual(by="bench")
        )
        if not result.sent:
            raise BenchError(f"run {result.run.id} was not sent: {result.send_error}")
        return result.run.id

    def _wait(self, ids: Sequence[str], deadline: float) -> None:
        finished = _pop(self.store, ADE_FINISHED_KEY, len(ids), deadline, "running ADE runs")
        if sorted(finished) != sorted(ids):
            raise BenchError(f"the ADE worker finished other runs than these: {finished[:3]}...")

    def burst(self, count: int, deadline: float, *, measured: bool = True) -> None:
        """Dispatch `count` runs back to back; measured: from the first dispatch() call to the
        last run's `finished_at`."""
        with self.meter.measuring() if measured else contextlib.nullcontext():
            started = time.time()
            ids = []
            for _ in range(count):
                _check_deadline(deadline, "dispatching a burst")
                ids.append(self._dispatch())
            dispatched = time.time()
            self._wait(ids, deadline)
        rows = _check_outcomes(self.engine, ids)
        if measured:
            last = max(_epoch(row["finished_at"]) for row in rows.values())
            self.result.bursts.append((count, last - started))
            self.dispatching += dispatched - started

    def trip(self, deadline: float) -> None:
        """One run, dispatched when nothing else is in flight: its times are read at `finish`."""
        called = time.time()
        run_id = self._dispatch()
        self.trips[run_id] = (called, time.time())
        self._wait([run_id], deadline)

    def finish(self, deadline: float) -> Result:
        del deadline
        result, calls = self.result, self.trips
        rows = _check_outcomes(self.engine, list(calls))
        result.latencies = [
            _epoch(rows[i]["finished_at"]) - called for i, (called, _) in calls.items()
        ]
        dispatched = sum(c for c, _ in result.bursts)
        result.notes.append(self.meter.note(dispatched, "run"))
        result.notes.append(
            f"dispatch() alone: {dispatched / self.dispatching:.0f} calls/s in the bursts"
        )

        def stage(fn: Callable[[str, dict[str, Any]], float]) -> str:
            return _ms(percentile([fn(i, row) for i, row in rows.items()], 50))

        result.notes.append(
            "p50 breakdown: dispatch() call "
            + stage(lambda i, _: calls[i][1] - calls[i][0])
            + ", dispatch returned -> run claimed "
            + stage(lambda i, r: _epoch(r["started_at"]) - calls[i][1])
            + ", claimed -> step started "
            + stage(lambda _, r: _epoch(r["step_started_at"]) - _epoch(r["started_at"]))
            + ", step (`true`) "
            + stage(lambda _, r: _epoch(r["step_finished_at"]) - _epoch(r["step_started_at"]))
            + ", step finished -> run finished "
            + stage(lambda _, r: _epoch(r["finished_at"]) - _epoch(r["step_finished_at"]))
        )
        return result


class Side(Protocol):
    def burst(self, count: int, deadline: float, *, measured: bool = True) -> None: ...
    def trip(self, deadline: float) -> None: ...
    def finish(self, deadline: float) -> Result: ...


def measure(sides: Sequence[Side], args: argparse.Namespace, deadline: float) -> list[Result]:
    """Both workers are up; the sides take turns, so that each figure of one side is measured
    in the same minutes as the others' and the machine's drift (raw no-op's p50 moved between
    1.6 and 3.5 ms within minutes on 2026-12-06) moves all of them alike.

    `--rounds` rounds; in each, every side in turn runs a burst of `--n` (throughput), then its
    share of the `--latency-n` round trips, back to back (latency), in the state its own burst
    left the machine in, as when each side was measured alone. `SWITCH_PAUSE_SECONDS` before
    each turn lets the previous side's tail (its worker's acks and events) settle."""
    for side in sides:
        side.burst(args.warmup, deadline, measured=False)
    trips = math.ceil(args.latency_n / args.rounds)
    for round_ in range(args.rounds):
        for side in sides:
            time.sleep(SWITCH_PAUSE_SECONDS)
            side.burst(args.n, deadline)
            for _ in range(min(trips, args.latency_n - round_ * trips)):
                side.trip(deadline)
    return [side.finish(deadline) for side in sides]


# --- the durable commits' floor under the latency ----------------------------------------------


@dataclass
class CommitProbe:
    """Latency of one durable commit on the bench's database (a one-row INSERT, autocommit,
    PostgreSQL's `synchronous_commit` as configured): each after `PROBE_GAP_SECONDS` of quiet,
    as a run's claim comes after its INSERT in the latency loop, and back to back."""

    after_idle: list[float]
    back_to_back: list[float]


def probe_commits(engine: Engine, count: int) -> CommitProbe:
    """Time `count` commits of each kind, by the driver (as the run path writes: `db.direct`).

    The probe's row has one index where a run's has nine, so it undercuts a run's commit: the
    floor computed from it (`p50_floor`) is a lower bound."""
    pooled = engine.raw_connection()
    try:
        connection = pooled.driver_connection
        assert connection is not None
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE TABLE IF NOT EXISTS bench_commit_probe (id bigserial PRIMARY KEY)"
            )

            def commit_after(gap: float) -> float:
                time.sleep(gap)
                started = time.perf_counter()
                cursor.execute("INSERT INTO bench_commit_probe DEFAULT VALUES")
                return time.perf_counter() - started

            after_idle = [commit_after(PROBE_GAP_SECONDS) for _ in range(count)]
            back_to_back = [commit_after(0) for _ in range(count)]
        connection.autocommit = False
    finally:
        pooled.close()
    return CommitProbe(after_idle, back_to_back)


#: Durable commits on an ADE run's path from its trigger to its step's start that raw Celery
#: does not make: the run's INSERT (before the send) and the worker's claim (before the step).
COMMITS_BEFORE_THE_STEP = 2


def p50_floor(true: Result, commits: CommitProbe) -> float:
    """The least ADE's p50 can be while its two commits stay durable: a raw Celery task that
    runs `true` (send, broker, worker, pool process, the command) plus the two commits, each
    after a quiet stretch as in the latency loop. Everything else ADE does on the way (the rule's
    admission, the containment supervisor, the plan) comes on top."""
    return true.p50 + COMMITS_BEFORE_THE_STEP * percentile(commits.after_idle, 50)


# --- setup, report, main ----------------------------------------------------------------------


def prepare_bench_rule(engine: Engine, work: Path, database_url: str, broker_url: str) -> Settings:
    """Migrate the scratch database, sync the rule `bench-true` from `work`/rules into it and
    return the settings of a worker using them (its project: `work`/project)."""
    (work / "rules").mkdir()
    (work / "project").mkdir()
    (work / "rules" / f"{RULE_ID}.yaml").write_text(RULE_YAML)
    upgrade(engine)
    loaded, _ = sync_rules_dir(create_session_factory(engine), work / "rules")
    if loaded.problems or not loaded.rules:
        raise BenchError(f"the bench rule does not load: {loaded.problems}")
    return Settings(
        database_url=database_url, broker_url=broker_url, projects={"default": work / "project"}
    )


def keep_months(session_factory: SessionFactory, months: int) -> int:
    """Make the monthly partitions of the `months` months before this one, empty, as a
    cluster keeping that much history has them (a run's statements find it by id, so they cost
    more with every partition they have to look in, unless aimed at the run's month); the
    number of partitions made."""
    now = utcnow()
    first = month_start(now)
    for _ in range(months):
        first = month_start(first - timedelta(days=1))
    with session_factory.begin() as session:
        return len(create_months(session, first, month_start(now) - timedelta(days=1)))


def run(args: argparse.Namespace) -> tuple[Result, Result, Result, CommitProbe]:
    require_loopback(args.admin_url, "--admin-url")
    require_loopback(args.redis_url, "--redis-url")
    store = redis.Redis.from_url(args.redis_url)
    try:
        store.flushdb()
    except redis.RedisError as exc:
        raise BenchError(f"Redis at {args.redis_url} is not usable: {exc}") from exc
    apps: list[Celery] = []
    deadline = time.monotonic() + args.timeout
    try:
        with (
            tempfile.TemporaryDirectory(prefix="ade-bench-") as tmp,
            scratch_database(args.admin_url, "ade_bench") as database_url,
        ):
            work = Path(tmp)
            engine = create_db_engine(database_url)
            try:
                session_factory = create_session_factory(engine)
                settings = prepare_bench_rule(engine, work, database_url, args.redis_url)
                if args.months:
                    made = keep_months(session_factory, args.months)
                    print(f"history kept: {made} partitions of `runs` and its children", flush=True)
                env = worker_env(settings)
                env[RAW_TRANSPORT_ENV] = args.raw_transport
                raw_app = baseline_app(settings, ade_transport=args.raw_transport == "ade")
                ade_app = create_celery_app(settings)
                apps += [raw_app, ade_app]
                print(
                    f"starting a raw Celery worker and an ADE worker ({args.concurrency} processes"
                    " each) ...",
                    flush=True,
                )
                with (
                    running_worker(
                        "bench.dispatch", RAW_QUEUE, env, raw_app, work, args.concurrency
                    ) as raw_pgid,
                    running_worker(
                        "bench.dispatch:ade_app",
                        BUILTIN_QUEUE,
                        env,
                        raw_app,
                        work,
                        args.concurrency,
                    ) as ade_pgid,
                ):
                    print(
                        f"measuring in turns: {args.rounds} rounds of bursts of {args.n}, "
                        f"{args.latency_n} round trips a side ...",
                        flush=True,
                    )
                    sides: list[Side] = [
                        RawSide(raw_app, store, NOOP_TASK, "raw celery no-op", raw_pgid),
                        RawSide(
                            raw_app, store, TRUE_TASK, "raw celery `true` subprocess", raw_pgid
                        ),
                        AdeSide(engine, session_factory, CelerySender(ade_app), store, ade_pgid),
                    ]
                    noop, true, ade = measure(sides, args, deadline)
                commits = probe_commits(engine, args.latency_n)  # the workers stopped: quiet
            finally:
                engine.dispose()
    finally:
        for app_ in apps:
            app_.close()
        with contextlib.suppress(redis.RedisError):
            store.flushdb()
        store.close()
    return noop, true, ade, commits


def report(noop: Result, true: Result, ade: Result, commits: CommitProbe) -> None:
    print()
    for result in (noop, true, ade):
        what = "trigger->finished" if result is ade else "send->finished"
        print(
            f"{result.label:30} {result.rate:7.1f} {result.unit}/s"
            f"   {what} p50 {_ms(result.p50):>9}  p95 {_ms(result.p95):>9}"
        )
        for note in result.notes:
            print(f"{'':32}{note}")
    throughput = ade.rate / true.rate
    p50_noop = ade.p50 / noop.p50
    rounds = ", ".join(
        f"{a / t:.3f}" for a, t in zip(ade.round_rates, true.round_rates, strict=True)
    )
    print()
    print("ratios:")
    verdict = "PASS" if throughput >= TARGET_THROUGHPUT_RATIO else "MISS"
    print(
        f"  ADE / raw-true throughput = {throughput:.3f}"
        f"  (target >= {TARGET_THROUGHPUT_RATIO})  {verdict}   (round by round: {rounds})"
    )
    verdict = "PASS" if p50_noop <= TARGET_P50_RATIO else "MISS"
    print(
        f"  ADE p50 / raw no-op p50   = {p50_noop:.1f}  (target <= {TARGET_P50_RATIO:g})  {verdict}"
    )
    print(f"  ADE p50 / raw-true p50    = {ade.p50 / true.p50:.1f}")
    print(f"  ADE / raw no-op throughput = {ade.rate / noop.rate:.2f}")
    floor = p50_floor(true, commits)
    print()
    print(
        f"a durable commit (one-row INSERT, by the driver): p50 "
        f"{_ms(percentile(commits.after_idle, 50))} after {_ms(PROBE_GAP_SECONDS)} of quiet, "
        f"{_ms(percentile(commits.back_to_back, 50))} back to back"
    )
    reach = "out of reach" if floor / noop.p50 > TARGET_P50_RATIO else "within reach"
    print(
        f"  floor of ADE p50 = raw-true p50 + {COMMITS_BEFORE_THE_STEP} such commits (the run's "
        f"INSERT, the claim) = {_ms(floor)}: the p50 ratio cannot go below "
        f"{floor / noop.p50:.1f} here ({reach} of the target while both stay durable)"
    )
    print(
        f"  ADE p50 - floor = {_ms(ade.p50 - floor)}: the rest of ADE's path (its CPU, the send, "
        f"the containment supervisor), {(ade.p50 - floor) / noop.p50:.1f} x raw no-op p50"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=300, help="tasks/runs per throughput burst")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per side, taken in turns")
    parser.add_argument("--latency-n", type=int, default=60, help="round trips per side")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured tasks per side")
    parser.add_argument("--concurrency", type=int, default=2, help="prefork processes per worker")
    parser.add_argument(
        "--months", type=int, default=0, help="past months of history partitions to keep"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="deadline of the measurements (s)"
    )
    parser.add_argument(
        "--raw-transport",
        choices=("kombu", "ade"),
        default="kombu",
        help="raw Celery's Redis transport: kombu's own (raw Celery as shipped) or ADE's",
    )
    parser.add_argument("--admin-url", default=DEFAULT_ADMIN_URL, help="PostgreSQL admin URL")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="broker (flushed!)")
    args = parser.parse_args(argv)
    if (
        args.n < 1
        or args.rounds < 1
        or args.latency_n < 2
        or args.warmup < 0
        or args.concurrency < 1
        or not 0 <= args.months <= 120
    ):
        parser.error(
            "need --n >= 1, --rounds >= 1, --latency-n >= 2, --warmup >= 0, --concurrency >= 1,"
            " 0 <= --months <= 120"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        noop, true, ade, commits = run(args)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    report(noop, true, ade, commits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
