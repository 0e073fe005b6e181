"""Worker memory benchmark: RSS of one real ADE worker's processes over N runs.

One real prefork worker of ADE's app (`--concurrency` pool processes, started as
`bench/dispatch.py` starts its ADE worker: `celery -A bench.dispatch:ade_app`, which reports each
finished run to the bench through Redis) executes `--runs` runs (default 10,000) of
the rule `bench-true` (one built-in `run-command: [true]` step), dispatched from this process in
bursts of `--every` (default 1,000) with `ade_tasks.runs.dispatch.dispatch`; after each burst has
finished (every run `succeeded`), the resident set size (VmRSS from /proc) of every process of
the worker's process group is printed: the main process and each pool process, by pid.

Growth is measured from the first sample (after the first burst: imports done, connections
open, caches warm) to the last, per process and in total. Target (issue 18): under 10 % after
warm-up.

The benchmark creates a scratch database `ade_membench_<pid>` (dropped at the end), uses Redis
database 14 (flushed before and after) and only talks to loopback services. Run it from the
repository root:

    .venv/bin/python bench/worker_memory.py [--runs 10000] [--every 1000] [--redis-url URL]

It exits non-zero when something breaks (a service is down, the worker dies, a run fails, the
deadline passes); a missed target is reported as MISS.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as a script: make `bench.*` importable
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import redis

from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_workers.celery.app import BUILTIN_QUEUE, CelerySender, create_celery_app
from bench.common import (
    BenchError,
    exit_on_sigterm,
    require_loopback,
    require_own_redis_db,
    scratch_database,
)
from bench.dispatch import AdeSide, prepare_bench_rule, running_worker, worker_env

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"
TARGET_GROWTH = 0.10
MAX_RUNS = 100_000


def group_rss(pgid: int) -> dict[int, int]:
    """pid -> resident set size in KiB of every process in a process group, from /proc."""
    sizes: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rpartition(")")[2].split()
            if int(stat[2]) != pgid:  # stat's 5th field, pgrp
                continue
            status = (entry / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                sizes[int(entry.name)] = int(line.split()[1])
    return sizes


def _mib(kib: int) -> str:
    return f"{kib / 1024:7.1f} MiB"


def run(args: argparse.Namespace) -> list[tuple[int, dict[int, int]]]:
    """Samples (runs done, pid -> KiB) after each burst."""
    require_loopback(args.admin_url, "--admin-url")
    require_loopback(args.redis_url, "--redis-url")
    store = redis.Redis.from_url(args.redis_url)
    try:
        store.flushdb()
    except redis.RedisError as exc:
        raise BenchError(f"Redis at {args.redis_url} is not usable: {exc}") from exc
    samples: list[tuple[int, dict[int, int]]] = []
    try:
        with (
            tempfile.TemporaryDirectory(prefix="ade-membench-") as tmp,
            scratch_database(args.admin_url, "ade_membench") as database_url,
        ):
            work = Path(tmp)
            engine = create_db_engine(database_url)
            app = None
            try:
                session_factory = create_session_factory(engine)
                settings = prepare_bench_rule(engine, work, database_url, args.redis_url)
                app = create_celery_app(settings)
                sender = CelerySender(app)
                deadline = time.monotonic() + args.deadline
                env = worker_env(settings)
                with running_worker(
                    "bench.dispatch:ade_app", BUILTIN_QUEUE, env, app, work, args.concurrency
                ) as pgid:
                    print(f"worker pid {pgid}: {args.runs:,} runs in bursts of {args.every:,}")
                    ade = AdeSide(engine, session_factory, sender, store, pgid)
                    done = 0
                    while done < args.runs:
                        burst = min(args.every, args.runs - done)
                        started = time.monotonic()
                        ade.burst(burst, deadline, measured=False)
                        done += burst
                        sizes = group_rss(pgid)
                        samples.append((done, sizes))
                        each = "  ".join(
                            f"{'main' if pid == pgid else pid}: {_mib(kib)}"
                            for pid, kib in sorted(sizes.items(), key=lambda kv: kv[0] != pgid)
                        )
                        rate = burst / (time.monotonic() - started)
                        print(f"{done:>7,} runs ({rate:5.0f}/s)  {each}", flush=True)
            finally:
                if app is not None:
                    app.close()
                engine.dispose()
    finally:
        with contextlib.suppress(redis.RedisError):
            store.flushdb()
        store.close()
    return samples


def report(samples: Sequence[tuple[int, dict[int, int]]]) -> bool:
    """Growth from the first sample (warm) to the last, per process and in total."""
    (first_runs, first), (last_runs, last) = samples[0], samples[-1]
    print(f"\ngrowth from {first_runs:,} runs (warm) to {last_runs:,} runs:")
    ok = True
    for pid in sorted(set(first) | set(last)):
        if pid not in first or pid not in last:
            print(f"  pid {pid}: {'started' if pid in last else 'exited'} in between")
            continue
        growth = last[pid] / first[pid] - 1
        ok = ok and growth < TARGET_GROWTH
        print(f"  pid {pid}: {_mib(first[pid])} -> {_mib(last[pid])}  {growth:+.1%}")
    total_first, total_last = sum(first.values()), sum(last.values())
    growth = total_last / total_first - 1
    verdict = "OK" if ok and growth < TARGET_GROWTH else "MISS"
    print(
        f"  all: {_mib(total_first)} -> {_mib(total_last)}  {growth:+.1%}   "
        f"target < {TARGET_GROWTH:.0%} per process: {verdict}"
    )
    return ok


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10_000, help="runs in all")
    parser.add_argument("--every", type=int, default=1_000, help="runs between samples")
    parser.add_argument("--concurrency", type=int, default=2, help="pool processes")
    parser.add_argument("--deadline", type=float, default=1800.0, help="seconds for all runs")
    parser.add_argument("--admin-url", default=DEFAULT_ADMIN_URL, help="PostgreSQL admin URL")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="broker (flushed!)")
    args = parser.parse_args(argv)
    if not 1 <= args.every <= args.runs <= MAX_RUNS or args.concurrency < 1:
        parser.error(f"need 1 <= --every <= --runs <= {MAX_RUNS:,} and --concurrency >= 1")
    if not 0 < args.deadline <= 7200:
        parser.error("need 0 < --deadline <= 7200")
    try:
        require_own_redis_db(args.redis_url, "bench/worker_memory.py")
    except BenchError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        samples = run(args)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    report(samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
