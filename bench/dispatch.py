"""Dispatch benchmark: ADE runs against raw Celery tasks on the same broker, pool and config.

What it measures, in one run:

(a) raw Celery: a no-op task and a task running the `true` subprocess, sent by name to a real
    worker (`celery -A bench.dispatch worker`, prefork, 2 processes) built by the same
    `create_celery_app` as ADE's worker, so broker, prefetch, acks_late and the rest of the
    reliable configuration are identical. The app ignores results and has no result backend, so
    each task records its finish time (`time.time()`) into a Redis list in the benchmark's
    Redis database; latency is that time minus the send time.
(b) ADE: runs of the rule `bench-true` (one built-in step, `run-command: [true]`), created with
    `ade_tasks.runs.dispatch.dispatch` from this process and executed by a real ADE worker
    (`celery -A ade_workers.celery.app worker`, same pool and flags) against PostgreSQL.
    Trigger-to-finished latency is `runs.finished_at` minus the time of the `dispatch()` call.

Throughput: N tasks/runs are sent as fast as one thread can (`--n`, default 300) and measured
from the first send to the last finish. Latency: `--latency-n` sequential round trips (the next
is sent only after the previous finished), so it is not queueing time; p50 and p95 are reported.
Each phase starts with a few unmeasured warm-up tasks so that pool processes have connected.

The durable commits' floor: once the ADE worker has stopped, one-row INSERTs on the scratch
database are timed, each after the latency loop's idle gap and back to back. An ADE run's path
holds everything raw Celery's `true` task does plus two such commits (the run's INSERT before
the send, the claim before the step), so raw `true`'s p50 plus two of them is a floor under
ADE's p50; the report prints it against the p50 target, and how far ADE's p50 sits above it.

The benchmark creates a scratch database `ade_bench_<pid>` (dropped at the end), uses Redis
database 12 (flushed before and after) and only talks to loopback services. Run it from the
repository root:

    make bench                      # = .venv/bin/python bench/dispatch.py
    .venv/bin/python bench/dispatch.py --n 500 --latency-n 100

It exits non-zero only when something breaks (a service is down, a worker does not start, a run
fails, a deadline passes); a missed target is reported as MISS, not as an error.
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from sqlalchemy import Engine, bindparam, text

from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.rules.sync import sync_rules_dir
from ade_tasks.runs.dispatch import TriggerEvent, dispatch
from ade_tasks.settings import Settings, get_settings
from ade_workers.celery.app import BUILTIN_QUEUE, CelerySender, create_celery_app
from ade_workers.engine.process import group_alive
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
ADE_LATENCY_POLL_SECONDS = 0.005
ADE_BATCH_POLL_SECONDS = 0.05
TARGET_THROUGHPUT_RATIO = 0.5
TARGET_P50_RATIO = 3.0


# --- the raw-Celery baseline, importable by `celery -A bench.dispatch worker` -----------------

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


def baseline_app(settings: Settings | None = None) -> Celery:
    """ADE's Celery app (same reliable config and queues) plus the two baseline tasks."""
    settings = settings or get_settings()
    app = create_celery_app(settings)
    url = settings.broker_url

    @app.task(name=NOOP_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
    def noop(key: str, seq: int) -> None:
        _record_finish(url, key, seq)

    @app.task(name=TRUE_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
    def true_subprocess(key: str, seq: int) -> None:
        subprocess.run(["true"], check=True)
        _record_finish(url, key, seq)

    return app


app: Celery  # declared only: `__getattr__` builds it on first access


def __getattr__(name: str) -> Celery:
    # `celery -A bench.dispatch` looks up `app`; build it on first access only.
    if name == "app":
        global app
        app = baseline_app()
        return app
    raise AttributeError(name)


# --- statistics and results -------------------------------------------------------------------


@dataclass
class Result:
    """One side of the comparison: burst throughput and sequential latencies (seconds)."""

    label: str
    unit: str
    count: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else math.inf

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
    """Where the CPU went during a burst: this process, the worker's process group, the rest.

    Linux only (/proc); the other sessions on the machine land in "other processes".
    """

    worker_pgid: int
    started: tuple[float, ...] = ()

    def _now(self) -> tuple[float, ...]:
        return (
            time.monotonic(),
            time.process_time(),
            _group_cpu_seconds(self.worker_pgid),
            machine_idle_seconds(),
        )

    def start(self) -> None:
        self.started = self._now()

    def note(self, count: int, unit: str) -> str:
        wall, ours, worker, idle = (b - a for a, b in zip(self.started, self._now(), strict=True))
        capacity = (os.cpu_count() or 1) * wall
        other = capacity - ours - worker - idle
        per = 1000 / count
        return (
            f"CPU per {unit} in the burst: sender process {ours * per:.1f} ms, worker "
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
    module: str, env: dict[str, str], control: Celery, log_dir: Path, concurrency: int
) -> Iterator[int]:
    """A real prefork worker for `module` on the builtin queue, up and answering pings.

    Yields its pid, which is also the id of the process group holding its pool processes.
    """
    name = f"bench-{uuid.uuid4().hex[:12]}@localhost"
    log_path = log_dir / f"{name.partition('@')[0]}.log"
    argv = [
        sys.executable, "-m", "celery", "-A", module, "worker",
        "-Q", BUILTIN_QUEUE, "-P", "prefork", "-c", str(concurrency),
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


# --- raw Celery phases ------------------------------------------------------------------------


def _check_deadline(deadline: float, doing: str) -> None:
    if time.monotonic() > deadline:
        raise BenchError(f"the phase deadline passed while {doing}; see --phase-timeout")


def _collect(store: redis.Redis, key: str, count: int, deadline: float) -> dict[int, float]:
    """Pop `count` finish records from `key`: sequence number -> finish time (epoch seconds)."""
    finished: dict[int, float] = {}
    while len(finished) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BenchError(f"only {len(finished)} of {count} tasks finished before the deadline")
        item = store.blpop([key], timeout=min(remaining, 1.0))
        if item is None:
            continue
        record = item[1]
        seq, stamp = (record.decode() if isinstance(record, bytes) else record).split()
        finished[int(seq)] = float(stamp)
    return finished


def raw_burst(
    app: Celery, store: redis.Redis, task: str, count: int, deadline: float
) -> tuple[float, float]:
    """Send `count` tasks back to back; (first send, last finish) as epoch seconds."""
    key = f"bench:{task}:burst:{uuid.uuid4().hex}"
    started = time.time()
    for seq in range(count):
        _check_deadline(deadline, "sending the burst")
        app.send_task(task, args=[key, seq], queue=BUILTIN_QUEUE)
    finished = _collect(store, key, count, deadline)
    return started, max(finished.values())


def raw_latencies(
    app: Celery, store: redis.Redis, task: str, count: int, deadline: float
) -> list[float]:
    """Sequential send-to-finish times of `count` tasks."""
    key = f"bench:{task}:latency:{uuid.uuid4().hex}"
    latencies = []
    for seq in range(count):
        sent = time.time()
        app.send_task(task, args=[key, seq], queue=BUILTIN_QUEUE)
        latencies.append(_collect(store, key, 1, deadline)[seq] - sent)
    return latencies


def bench_raw(
    app: Celery,
    store: redis.Redis,
    task: str,
    label: str,
    args: argparse.Namespace,
    worker_pgid: int,
) -> Result:
    deadline = time.monotonic() + args.phase_timeout
    if args.warmup:
        raw_burst(app, store, task, args.warmup, deadline)
    meter = CpuMeter(worker_pgid)
    meter.start()
    started, last = raw_burst(app, store, task, args.n, deadline)
    result = Result(label, "tasks", args.n, last - started, notes=[meter.note(args.n, "task")])
    result.latencies = raw_latencies(app, store, task, args.latency_n, deadline)
    return result


# --- ADE phase --------------------------------------------------------------------------------


def _epoch(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def _dispatch_one(session_factory: SessionFactory, sender: CelerySender) -> str:
    result = dispatch(session_factory, sender, RULE_ID, TriggerEvent.manual(by="bench"))
    if not result.sent:
        raise BenchError(f"run {result.run.id} was not sent: {result.send_error}")
    return result.run.id


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


def _wait_all_finished(engine: Engine, ids: Sequence[str], deadline: float) -> None:
    query = text("SELECT count(*) FROM runs WHERE id IN :ids AND finished_at IS NOT NULL")
    query = query.bindparams(bindparam("ids", expanding=True))
    while True:
        with engine.connect() as connection:
            done = connection.execute(query, {"ids": list(ids)}).scalar_one()
        if done >= len(ids):
            return
        if time.monotonic() > deadline:
            raise BenchError(f"only {done} of {len(ids)} ADE runs finished before the deadline")
        time.sleep(ADE_BATCH_POLL_SECONDS)


def _wait_finished(engine: Engine, run_id: str, deadline: float) -> None:
    query = text("SELECT finished_at FROM runs WHERE id = :id")
    with engine.connect() as connection:
        while connection.execute(query, {"id": run_id}).scalar_one_or_none() is None:
            connection.rollback()  # a fresh snapshot for the next poll
            if time.monotonic() > deadline:
                raise BenchError(f"ADE run {run_id} did not finish before the deadline")
            time.sleep(ADE_LATENCY_POLL_SECONDS)


def ade_burst(
    engine: Engine,
    session_factory: SessionFactory,
    sender: CelerySender,
    count: int,
    deadline: float,
) -> tuple[float, float, float]:
    """Dispatch `count` runs back to back; (first dispatch, last dispatch returned, last finish)."""
    started = time.time()
    ids = []
    for _ in range(count):
        _check_deadline(deadline, "dispatching the burst")
        ids.append(_dispatch_one(session_factory, sender))
    dispatched = time.time()
    _wait_all_finished(engine, ids, deadline)
    rows = _check_outcomes(engine, ids)
    return started, dispatched, max(_epoch(row["finished_at"]) for row in rows.values())


def bench_ade(
    engine: Engine,
    session_factory: SessionFactory,
    sender: CelerySender,
    args: argparse.Namespace,
    worker_pgid: int,
) -> Result:
    deadline = time.monotonic() + args.phase_timeout
    if args.warmup:
        ade_burst(engine, session_factory, sender, args.warmup, deadline)
    meter = CpuMeter(worker_pgid)
    meter.start()
    started, dispatched, last = ade_burst(engine, session_factory, sender, args.n, deadline)
    result = Result("ADE run-command true", "runs", args.n, last - started)
    result.notes.append(meter.note(args.n, "run"))
    result.notes.append(
        f"dispatch() alone: {args.n / (dispatched - started):.0f} calls/s in the burst"
    )

    calls: dict[str, tuple[float, float]] = {}
    for _ in range(args.latency_n):
        called = time.time()
        run_id = _dispatch_one(session_factory, sender)
        calls[run_id] = (called, time.time())
        _wait_finished(engine, run_id, deadline)
    rows = _check_outcomes(engine, list(calls))
    result.latencies = [_epoch(rows[i]["finished_at"]) - called for i, (called, _) in calls.items()]

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


# --- the durable commits' floor under the latency ----------------------------------------------


@dataclass
class CommitProbe:
    """Latency of one durable commit on the bench's database (a one-row INSERT, autocommit,
    PostgreSQL's `synchronous_commit` as configured): each after the idle gap the latency loop
    leaves between runs, and back to back."""

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

            after_idle = [commit_after(ADE_LATENCY_POLL_SECONDS) for _ in range(count)]
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
    after an idle gap as in the latency loop. Everything else ADE does on the way (the rule's
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


def run(args: argparse.Namespace) -> tuple[Result, Result, Result, CommitProbe]:
    require_loopback(args.admin_url, "--admin-url")
    require_loopback(args.redis_url, "--redis-url")
    store = redis.Redis.from_url(args.redis_url)
    try:
        store.flushdb()
    except redis.RedisError as exc:
        raise BenchError(f"Redis at {args.redis_url} is not usable: {exc}") from exc
    apps: list[Celery] = []
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
                env = worker_env(settings)
                raw_app = baseline_app(settings)
                ade_app = create_celery_app(settings)
                apps += [raw_app, ade_app]

                print(f"raw Celery phase (n={args.n}, latency-n={args.latency_n}) ...", flush=True)
                with running_worker("bench.dispatch", env, raw_app, work, args.concurrency) as pgid:
                    noop = bench_raw(raw_app, store, NOOP_TASK, "raw celery no-op", args, pgid)
                    true = bench_raw(
                        raw_app, store, TRUE_TASK, "raw celery `true` subprocess", args, pgid
                    )
                print("ADE phase ...", flush=True)
                with running_worker(
                    "ade_workers.celery.app", env, raw_app, work, args.concurrency
                ) as pgid:
                    sender = CelerySender(ade_app)
                    ade = bench_ade(engine, session_factory, sender, args, pgid)
                commits = probe_commits(engine, args.latency_n)  # the worker stopped: quiet
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
    print()
    print("ratios:")
    verdict = "PASS" if throughput >= TARGET_THROUGHPUT_RATIO else "MISS"
    print(
        f"  ADE / raw-true throughput = {throughput:.2f}"
        f"  (target >= {TARGET_THROUGHPUT_RATIO})  {verdict}"
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
        f"{_ms(percentile(commits.after_idle, 50))} after a {_ms(ADE_LATENCY_POLL_SECONDS)} idle "
        f"gap, {_ms(percentile(commits.back_to_back, 50))} back to back"
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
    parser.add_argument("--latency-n", type=int, default=50, help="sequential round trips")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured tasks per phase")
    parser.add_argument("--concurrency", type=int, default=2, help="prefork processes per worker")
    parser.add_argument(
        "--phase-timeout", type=float, default=120.0, help="deadline of each phase (s)"
    )
    parser.add_argument("--admin-url", default=DEFAULT_ADMIN_URL, help="PostgreSQL admin URL")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="broker (flushed!)")
    args = parser.parse_args(argv)
    if args.n < 1 or args.latency_n < 2 or args.warmup < 0 or args.concurrency < 1:
        parser.error("need --n >= 1, --latency-n >= 2, --warmup >= 0, --concurrency >= 1")
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
