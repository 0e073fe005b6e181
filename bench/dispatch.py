"""Dispatch benchmark: ADE runs against raw Celery tasks on the same broker, pool and config.

Three real prefork workers (2 processes each, `--concurrency`) run side by side, all built by
`create_celery_app`, so broker, prefetch, acks_late and the rest of the reliable configuration
are identical (the sides: `bench/dispatch_sides.py`, the workers: `bench/dispatch_workers.py`):

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
(c) durable Celery, what a team would run for a durable task history: `celery -A
    bench.dispatch_durable worker` on `bench.durable`, the raw side's app plus a PostgreSQL
    result backend (SQLAlchemy, on the scratch database) and `task_track_started=True`, running
    the same `true` task; its finish is recorded once its result is stored
    (`bench/dispatch_durable.py`). The report gives ADE / this side's throughput and p50, round
    by round too (target: ADE's throughput >= 1.5x this side's).

The raw sides are Celery as shipped: their apps and workers use kombu's own Redis transport,
where ADE's use `ade_workers.celery.redis_transport` (one Redis client per channel instead of one
built for every publish and ack). `--raw-transport ade` gives both raw sides ADE's transport too,
for the like-for-like ratio of ADE's own work to Celery's.

The sides take turns (`measure`), so that the machine's drift reaches all of them alike.
Throughput: `--rounds` rounds of one burst a side of `--n` tasks/runs sent as fast as one thread
can, each from the first send to the last finish; a side's throughput is all its items over all
its bursts' time, and the report gives each round's ratio too. Latency: `--latency-n` round trips
a side, split between the rounds, each share right after the side's burst; a round trip is sent
only after the previous one finished, so it is not queueing time; p50 and p95 are reported.

The durable commits' floor: once the workers have stopped, one-row INSERTs on the scratch
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
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis
from celery import Celery, signals
from sqlalchemy import Engine

from ade_tasks.clock import utcnow
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.db.partitions import create_months, month_start
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.settings import Settings, get_settings
from ade_workers.celery.app import BUILTIN_QUEUE, EXECUTE_TASK, CelerySender, create_celery_app
from bench.common import BenchError, exit_on_sigterm, percentile, require_loopback, scratch_database
from bench.dispatch_durable import DURABLE_QUEUE, DurableSide, durable_app
from bench.dispatch_floor import (
    COMMITS_BEFORE_THE_STEP,
    PROBE_GAP_SECONDS,
    CommitProbe,
    p50_floor,
    probe_commits,
)
from bench.dispatch_sides import (
    ADE_FINISHED_KEY,
    RAW_QUEUE,
    RAW_TRANSPORT_ENV,
    RULE_ID,
    AdeSide,
    RawSide,
    Result,
    Side,
    ms,
    record_finish,
    recorder,
)
from bench.dispatch_workers import running_worker, worker_env

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/12"

NOOP_TASK = "bench.noop"
TRUE_TASK = "bench.true_subprocess"
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

#: Quiet before each side's turn, for the previous side's tail to settle.
SWITCH_PAUSE_SECONDS = 0.05
TARGET_THROUGHPUT_RATIO = 0.5
#: ADE's throughput against the durable baseline's (raw Celery with a PostgreSQL result backend).
TARGET_DURABLE_RATIO = 1.5
TARGET_P50_RATIO = 3.0


# --- the two workers' apps, importable by `celery -A bench.dispatch[:ade_app] worker` -----------


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
        record_finish(url, key, seq)

    @app.task(name=TRUE_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
    def true_subprocess(key: str, seq: int) -> None:
        subprocess.run(["true"], check=True)
        record_finish(url, key, seq)

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
            recorder(url).rpush(ADE_FINISHED_KEY, str(args[0]))

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


def measure(sides: Sequence[Side], args: argparse.Namespace, deadline: float) -> list[Result]:
    """The workers are up; the sides take turns, so that each figure of one side is measured
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
    results = [side.finish(deadline) for side in sides]
    for result in results:
        result.trips_per_round = trips
    return results


# --- the durable commits' floor under the latency ----------------------------------------------
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


def run(args: argparse.Namespace) -> tuple[Result, Result, Result, Result, CommitProbe]:
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
                durable = durable_app(settings, ade_transport=args.raw_transport == "ade")
                ade_app = create_celery_app(settings)
                apps += [raw_app, durable, ade_app]
                print(
                    "starting a raw Celery worker, one with a PostgreSQL result backend and an"
                    f" ADE worker ({args.concurrency} processes each) ...",
                    flush=True,
                )
                with (
                    running_worker(
                        "bench.dispatch", RAW_QUEUE, env, raw_app, work, args.concurrency
                    ) as raw_pgid,
                    running_worker(
                        "bench.dispatch_durable",
                        DURABLE_QUEUE,
                        env,
                        raw_app,
                        work,
                        args.concurrency,
                    ) as durable_pgid,  # fmt: skip
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
                        DurableSide(durable, store, engine, durable_pgid, args.warmup),
                        AdeSide(engine, session_factory, CelerySender(ade_app), store, ade_pgid),
                    ]
                    noop, true, durable_true, ade = measure(sides, args, deadline)
                commits = probe_commits(engine, args.latency_n)  # the workers stopped: quiet
            finally:
                engine.dispose()
    finally:
        for app_ in apps:
            app_.close()
        with contextlib.suppress(redis.RedisError):
            store.flushdb()
        store.close()
    return noop, true, durable_true, ade, commits


def _by_round(ade: list[float], other: list[float], digits: int) -> str:
    return ", ".join(f"{a / o:.{digits}f}" for a, o in zip(ade, other, strict=True))


def report(noop: Result, true: Result, durable: Result, ade: Result, commits: CommitProbe) -> None:
    print()
    for result in (noop, true, durable, ade):
        what = "trigger->finished" if result is ade else "send->finished"
        print(
            f"{result.label:30} {result.rate:7.1f} {result.unit}/s"
            f"   {what} p50 {ms(result.p50):>9}  p95 {ms(result.p95):>9}"
        )
        for note in result.notes:
            print(f"{'':32}{note}")
    throughput = ade.rate / true.rate
    p50_noop = ade.p50 / noop.p50
    rounds = _by_round(ade.round_rates, true.round_rates, 3)
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
    durable_rate = ade.rate / durable.rate
    verdict = "PASS" if durable_rate >= TARGET_DURABLE_RATIO else "MISS"
    print(
        f"  ADE / durable-celery throughput = {durable_rate:.3f}  (target >= "
        f"{TARGET_DURABLE_RATIO:g})  {verdict}   (round by round: "
        f"{_by_round(ade.round_rates, durable.round_rates, 3)})"
    )
    print(
        f"  ADE p50 / durable-celery p50    = {ade.p50 / durable.p50:.2f}   (round by round: "
        f"{_by_round(ade.round_p50s, durable.round_p50s, 2)})"
    )
    floor = p50_floor(true, commits)
    print()
    print(
        f"a durable commit (one-row INSERT, by the driver): p50 "
        f"{ms(percentile(commits.after_idle, 50))} after {ms(PROBE_GAP_SECONDS)} of quiet, "
        f"{ms(percentile(commits.back_to_back, 50))} back to back"
    )
    reach = "out of reach" if floor / noop.p50 > TARGET_P50_RATIO else "within reach"
    print(
        f"  floor of ADE p50 = raw-true p50 + {COMMITS_BEFORE_THE_STEP} such commits (the run's "
        f"INSERT, the claim) = {ms(floor)}: the p50 ratio cannot go below "
        f"{floor / noop.p50:.1f} here ({reach} of the target while both stay durable)"
    )
    print(
        f"  ADE p50 - floor = {ms(ade.p50 - floor)}: the rest of ADE's path (its CPU, the send, "
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
        figures = run(args)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    report(*figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
