"""Cluster simulation: a large team's rules, webhooks and manual runs on one machine's real
processes, at a multiple of real time, until something bends.

What runs (all real processes, on loopback): the API (`ade-tasks api`, `--api-processes`
uvicorn processes), `--workers` `celery worker` processes on the run queues (prefork,
`--concurrency` each) and, as the deployment examples do, one more on `ade.ingress,ade.control`
(matching and the recovery sweep, `--ingress-concurrency`; 0: none, every worker on every queue,
as before 2026-12-07), `--beats` beats (`celery beat -S
ade_workers.celery.beat:DatabaseScheduler`), PostgreSQL (a scratch database `ade_cluster_<pid>`,
dropped at the end) and Redis (database 15, flushed before and after).

What it simulates:

* `--rules` rules (default 100,000) in the mix of `bench.cluster_mix`: cron every minute to
  daily, spread over the hour and the day, GitHub `pull_request.opened` rules (one repository
  each) and manual-only rules, each one built-in step `run-command: true`, synced from YAML files;
* a history of `--prefill-runs` finished runs (default 10,000,000) written with
  `generate_series` (`bench.run_history.fill_history`) before anything starts, the metrics
  rollup advanced over it once (as after an upgrade);
* `--speed` times real time (default 10): the beats run on the simulated clock
  (`ADE_BEAT_CLOCK_ORIGIN/ANCHOR/SPEED`, `ade_tasks.schedule.scheduler.simulated_clock`), so the
  cron slots of `--speed` minutes fire in one real minute, and the webhooks (`--webhooks-per-s`)
  and manual runs (`--manual-per-s`), given per second of the team's real time, are sent at
  `--speed` times those rates (`bench.cluster_load`: open loop, signed deliveries, an operator
  token). `--speed` is thus the load of a team that many times larger with the same rules; a team
  10x larger also has 10x the rules, which the beats' and the matcher's costs grow with.

Timeline: the beats start (simulated time begins), every beat loads the rules (each claims the
housekeeping slot after its first refresh), the load starts, `--warmup` seconds later the
measured window of `--minutes` real minutes begins (default 10); afterwards up to
`--drain-seconds` for the runs triggered in the window to start. Housekeeping on the beats runs
on the simulated clock too (the sweeps run `--speed` times as often); the workers' runs on the
real one.

Reported: runs/s offered and started; p50/p99 trigger-to-start (cron: from the slot's real
instant; webhook: from the delivery's send; manual: from the request's send) and its two parts
(trigger -> queued, queued -> started); queue depths (the Redis lists, kombu's unacked hash, runs
`queued` in the database); database size (pg_database_size) per million prefilled runs and per
million simulated runs; CPU per run by component (/proc: the API, the workers' trees with the
`true` commands, the beats, the scratch database's backends, Redis, this process, the rest of
the machine); where it bends (`bench.cluster_verdict`: the first core, machine, queue or p99 to
saturate, with its figures), and what a team `--team-factor` times larger would need.

    .venv/bin/python bench/cluster.py [--rules 100000] [--prefill-runs 10000000] [--minutes 10]
        [--speed 10] [--webhooks-per-s 1] [--manual-per-s 0.2] [--redis-url redis://...:6379/15]

It exits non-zero only when something breaks (a service is down, a process does not start or
dies); a saturated resource is the figure it is looking for, not an error.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as a script: make `bench.*` importable
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import math
import os
import secrets
import signal
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import redis
import uvloop
import yaml
from celery import Celery
from sqlalchemy import Engine, text

from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from ade_tasks.db import run_rollups
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.settings import Settings
from ade_workers.celery.app import create_celery_app
from bench import cluster_load, cluster_mix, cluster_report
from bench.beat_processes import Child, start_child, stop_children
from bench.beat_slot import wait_beats_ready
from bench.cluster_probe import Probe
from bench.common import (
    BenchError,
    exit_on_sigterm,
    require_loopback,
    require_own_redis_db,
    scratch_database,
    tail,
)
from bench.run_history import fill_history
from bench.servers import base_env, serving

REPO_ROOT = Path(__file__).resolve().parent.parent
ADE_TASKS = Path(sys.executable).parent / "ade-tasks"
DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
OWNER = "bench/cluster.py"
WORKER_START_SECONDS = 60.0
#: The deployment examples' split: runs in one pool, matching and the sweep in another.
RUN_QUEUES = "ade.builtin,ade.agent"
INGRESS_QUEUES = "ade.ingress,ade.control"
DRAIN_POLL_SECONDS = 1.0
_SIZE = text("SELECT pg_database_size(current_database())")


def database_size(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(_SIZE).scalar_one())


def prefill(engine: Engine, runs: int, rules: int) -> None:
    """`runs` finished runs over the last 30 days, and the metrics rollup advanced over them."""
    sessions = create_session_factory(engine)
    fill_history(sessions, runs, rules, end=utcnow(), mixed=False)
    with sessions.begin() as session:
        # fill_history() also leaves 100 queued runs of rules that do not exist here; the sweep
        # would hand them to the workers in the middle of the measurement.
        session.execute(text("DELETE FROM runs WHERE status = 'queued'"))
        run_rollups.advance(session)


#: A rules file holds at most 1 MiB: 1,000 of the mix's rules fit.
RULES_PER_FILE = 1000


def write_rules(engine: Engine, rules_dir: Path, count: int) -> cluster_mix.Layout:
    """The mix's rules as YAML files of `RULES_PER_FILE`, synced the way `rules sync` does."""
    docs, layout = cluster_mix.documents(count)
    rules_dir.mkdir()
    for first in range(0, count, RULES_PER_FILE):
        chunk = docs[first : first + RULES_PER_FILE]
        (rules_dir / f"sim-{first:06d}.yaml").write_text(yaml.safe_dump(chunk, sort_keys=False))
    loaded, _ = sync_rules_dir(create_session_factory(engine), rules_dir)
    if loaded.problems or len(loaded.rules) != count:
        raise BenchError(f"the simulation's rules do not load: {loaded.problems[:3]}")
    return layout


def operator_token(engine: Engine) -> str:
    with create_session_factory(engine).begin() as session:
        _, secret = tokens_db.create_token(session, "bench-cluster", Role.OPERATOR, "bench")
    return secret


def wait_workers(control: Celery, workers: list[Child], names: list[str]) -> None:
    """Until every worker answers a ping (each has connected to the broker)."""
    deadline = time.monotonic() + WORKER_START_SECONDS
    waiting = set(names)
    while waiting:
        for worker in workers:
            worker.check_alive()
        answers = control.control.ping(destination=sorted(waiting), timeout=1) or []
        waiting -= {name for answer in answers for name in answer}
        if waiting and time.monotonic() > deadline:
            logs = "\n".join(f"--- {w.name}:\n{tail(w.log, 8)}" for w in workers)
            raise BenchError(f"workers {sorted(waiting)} did not answer a ping in time\n{logs}")


_PENDING = text(
    "SELECT (SELECT count(*) FROM runs WHERE status = 'queued' AND queued_at <= :until)"
    " + (SELECT count(*) FROM ingress_events WHERE status = 'received' AND received_at <= :until)"
)


def wait_drained(engine: Engine, until: datetime, seconds: float) -> float:
    """Until no run or delivery that arrived before `until` is still waiting (at most
    `seconds`); returns how long it took."""
    started = time.monotonic()
    for _ in range(int(seconds / DRAIN_POLL_SECONDS) + 1):
        with engine.connect() as connection:
            if not connection.execute(_PENDING, {"until": until}).scalar_one():
                break
        time.sleep(DRAIN_POLL_SECONDS)
    return time.monotonic() - started


def simulate(args: argparse.Namespace) -> cluster_report.Outcome:
    require_loopback(args.admin_url, "--admin-url")
    require_loopback(args.redis_url, "--redis-url")
    store = redis.Redis.from_url(args.redis_url)
    try:
        store.flushdb()
        redis_pid = int(store.info("server")["process_id"])
    except redis.RedisError as exc:
        raise BenchError(f"Redis at {args.redis_url} is not usable: {exc}") from exc
    try:
        with (
            tempfile.TemporaryDirectory(prefix="ade-cluster-") as tmp,
            scratch_database(args.admin_url, "ade_cluster") as database_url,
        ):
            engine = create_db_engine(database_url)
            try:
                return run_cluster(args, Path(tmp), engine, database_url, store, redis_pid)
            finally:
                engine.dispose()
    finally:
        with contextlib.suppress(redis.RedisError):
            store.flushdb()
        store.close()


def run_cluster(
    args: argparse.Namespace,
    work: Path,
    engine: Engine,
    database_url: str,
    store: redis.Redis,
    redis_pid: int,
) -> cluster_report.Outcome:
    out = cluster_report.Outcome(args=args, loadavg_before=os.getloadavg())
    upgrade(engine)
    out.sizes["empty"] = database_size(engine)
    began = time.monotonic()
    if args.prefill_runs:
        print(f"prefilling {args.prefill_runs:,} runs ...", flush=True)
        prefill(engine, args.prefill_runs, args.rules)
    out.prefill_seconds = time.monotonic() - began
    out.sizes["prefilled"] = database_size(engine)
    began = time.monotonic()
    layout = write_rules(engine, work / "rules", args.rules)
    out.sync_seconds = time.monotonic() - began
    print(f"synced {args.rules:,} rules in {out.sync_seconds:.1f} s", flush=True)
    (work / "project").mkdir()
    secret = secrets.token_hex(32)
    token = operator_token(engine)
    env = base_env() | {
        "ADE_DATABASE_URL": database_url,
        "ADE_BROKER_URL": args.redis_url,
        "ADE_GITHUB__WEBHOOK_SECRET": secret,
        "ADE_PROJECTS__DEFAULT": str(work / "project"),
        "ADE_DATA_DIR": str(work / "data"),
    }
    api_argv = [str(ADE_TASKS), "api", "--no-sync-rules", "--workers", str(args.api_processes)]
    children: list[Child] = []
    control = create_celery_app(Settings(database_url=database_url, broker_url=args.redis_url))
    try:
        with serving("ade-api", api_argv, env, work) as api:
            names = [f"sim-{i}-{uuid.uuid4().hex[:6]}@localhost" for i in range(args.workers)]
            pools = [(name, args.concurrency, RUN_QUEUES) for name in names]
            if args.ingress_concurrency:
                names.append(f"sim-ingress-{uuid.uuid4().hex[:6]}@localhost")
                pools.append((names[-1], args.ingress_concurrency, INGRESS_QUEUES))
            for index, (name, concurrency, queues) in enumerate(pools):
                argv = [
                    sys.executable, "-m", "celery", "-A", "ade_workers.celery.app", "worker",
                    "-P", "prefork", "-c", str(concurrency), "--without-mingle",
                    "--without-gossip", "-n", name, "--loglevel=WARNING",
                    *(["-Q", queues] if args.ingress_concurrency else []),
                ]  # fmt: skip
                children.append(start_child(f"worker-{index}", argv, env, work, work))
            wait_workers(control, children, names)
            out.sizes["start"] = database_size(engine)
            anchor = datetime.now(UTC)
            out.clock = (anchor.replace(second=0, microsecond=0), anchor, args.speed)
            beat_env = env | {
                "ADE_BEAT_CLOCK_ORIGIN": out.clock[0].isoformat(),
                "ADE_BEAT_CLOCK_ANCHOR": anchor.isoformat(),
                "ADE_BEAT_CLOCK_SPEED": str(args.speed),
            }
            beats = []
            for index in range(args.beats):
                argv = [
                    sys.executable, "-m", "celery", "-A", "ade_workers.celery.app", "beat",
                    "-S", "ade_workers.celery.beat:DatabaseScheduler", "--loglevel", "WARNING",
                    "-s", str(work / f"beat-{index}.schedule"),
                ]  # fmt: skip
                beats.append(start_child(f"beat-{index}", argv, beat_env, work, work))
            children += beats
            out.beats_ready_seconds = wait_beats_ready(
                engine, beats, time.time() + args.start_timeout
            )
            print(f"beats ready {out.beats_ready_seconds:.1f} s after starting", flush=True)
            roots = {
                "api": [api.proc.pid],
                "workers": [c.proc.pid for c in children if c.name.startswith("worker")],
                "beats": [b.proc.pid for b in beats],
            }
            load(args, out, Probe(roots, engine, store, redis_pid), api.url, token, secret, layout)
            for child in children:
                child.check_alive()
            until = datetime.fromtimestamp(out.window[1], UTC)
            out.drain_seconds = wait_drained(engine, until, args.drain_seconds)
            out.collected_at = time.time()
            out.sizes["end"] = database_size(engine)
            cluster_report.collect(engine, out)
    finally:
        stop_children(children)
        control.close()
    return out


def load(
    args: argparse.Namespace,
    out: cluster_report.Outcome,
    probe: Probe,
    url: str,
    token: str,
    secret: str,
    layout: cluster_mix.Layout,
) -> None:
    """The open-loop load for `--warmup` + `--minutes`, sampled by `probe` in a thread."""
    seconds = args.warmup + args.minutes * 60
    rates = (args.webhooks_per_s * args.speed, args.manual_per_s * args.speed)
    stop = threading.Event()
    sampler = threading.Thread(
        target=probe.run,
        args=(args.sample_seconds, stop, int(seconds / args.sample_seconds) + 10),
        daemon=True,
    )
    print(
        f"load: {seconds:.0f} s ({args.warmup:g} s warm-up) at {args.speed:g}x: webhooks"
        f" {rates[0]:g}/s, manual runs {rates[1]:g}/s, cron"
        f" {cluster_mix.cron_runs_per_second(args.rules, args.speed):.1f} slots/s",
        flush=True,
    )
    started = time.time()
    out.window = (started + args.warmup, started + seconds)
    out.window_monotonic = time.monotonic() + args.warmup
    sampler.start()
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            out.load = runner.run(
                cluster_load.generate(url, token, secret.encode(), layout, rates, seconds)
            )
    finally:
        stop.set()
        sampler.join(30)
    out.snapshots, out.probe_errors = probe.snapshots, probe.errors


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add = parser.add_argument
    add("--rules", type=int, default=100_000, help="rules in the mix")
    add("--prefill-runs", type=int, default=10_000_000, help="finished runs written before")
    add("--minutes", type=float, default=10.0, help="measured real minutes")
    add("--speed", type=float, default=10.0, help="multiple of real time (cron and rates)")
    add("--webhooks-per-s", type=float, default=1.0, help="deliveries per team second")
    add("--manual-per-s", type=float, default=0.2, help="manual runs per team second")
    add("--workers", type=int, default=2, help="celery worker processes")
    add("--concurrency", type=int, default=2, help="prefork processes per worker")
    add("--ingress-concurrency", type=int, default=2, help="of the ingress worker (0: none)")
    add("--beats", type=int, default=3, help="beat processes")
    add("--api-processes", type=int, default=1, help="uvicorn processes of the API")
    add("--warmup", type=float, default=20.0, help="unmeasured seconds of load first")
    add("--drain-seconds", type=float, default=120.0, help="at most, for the window's runs")
    add("--start-timeout", type=float, default=600.0, help="for the beats to load the rules")
    add("--sample-seconds", type=float, default=2.0, help="between samples")
    add("--p99-bound", type=float, default=5.0, help="p99 trigger-to-start that is too slow")
    add("--team-factor", type=float, default=10.0, help="the larger team to plan for")
    add("--admin-url", default=DEFAULT_ADMIN_URL, help="PostgreSQL admin URL")
    add("--redis-url", default=DEFAULT_REDIS_URL, help="broker (flushed!)")
    args = parser.parse_args(argv)
    checks = [
        (len(cluster_mix.MIX) <= args.rules <= 1_000_000, "8 <= --rules <= 1,000,000"),
        (0 <= args.prefill_runs <= 100_000_000, "0 <= --prefill-runs <= 100,000,000"),
        (0 < args.minutes <= 60 and 0 < args.speed <= 600, "0 < --minutes <= 60, --speed <= 600"),
        (args.webhooks_per_s >= 0 and args.manual_per_s >= 0, "rates >= 0"),
        (args.webhooks_per_s * args.speed <= 1000, "--webhooks-per-s x --speed <= 1000"),
        (args.manual_per_s * args.speed <= 1000, "--manual-per-s x --speed <= 1000"),
        (min(args.workers, args.concurrency, args.beats, args.api_processes) >= 1, "counts >= 1"),
        (0 <= args.warmup <= 600 and 0 <= args.drain_seconds <= 3600, "warm-up, drain bounds"),
        (0.5 <= args.sample_seconds <= 60, "0.5 <= --sample-seconds <= 60"),
        (0 < args.start_timeout <= 3600, "0 < --start-timeout <= 3600"),
    ]
    for ok, need in checks:
        if not ok:
            parser.error(f"need {need}")
    try:
        require_own_redis_db(args.redis_url, OWNER)
    except BenchError as exc:
        parser.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        outcome = simulate(args)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; processes stopped, scratch database dropped", file=sys.stderr)
        return 130
    cluster_report.report(outcome)
    return 0 if math.isfinite(outcome.window[0]) else 1


if __name__ == "__main__":
    sys.exit(main())
