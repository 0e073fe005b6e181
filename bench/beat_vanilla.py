"""The vanilla side of `bench/beat.py`: plain Celery beat (PersistentScheduler) sending N
`crontab()` entries at one minute boundary. `celery -A bench.beat_vanilla beat` imports this
module's `app`, built from the environment on first access."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.schedules import crontab, schedule

from bench.beat_processes import (
    READY_MARGIN_SECONDS,
    REPO_ROOT,
    Child,
    CpuSample,
    base_env,
    cpu_note,
    iso,
    plan_boundary,
    sleep_until,
    start_child,
    stop_children,
)
from bench.beat_results import POLL_SECONDS, Result
from bench.common import BenchError, tail

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"
# Read by `celery -A bench.beat_vanilla beat` from its environment.
ENTRIES_ENV = "BENCH_BEAT_ENTRIES"
BROKER_ENV = "BENCH_BEAT_BROKER_URL"
NOOP_TASK = "bench.noop"
VANILLA_QUEUE = "bench.vanilla"
READY_TASK = "bench.ready"
READY_QUEUE = "bench.vanilla.ready"  # a 1 s entry: its first message says the beat is ticking


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
    # `celery -A bench.beat_vanilla` looks up `app`; build it on first access only.
    if name == "app":
        global app
        entries = int(os.environ.get(ENTRIES_ENV, "10000"))
        app = vanilla_app(os.environ.get(BROKER_ENV, DEFAULT_REDIS_URL), entries)
        return app
    raise AttributeError(name)


def wait_vanilla_ready(store: redis.Redis, beat: Child, boundary: float) -> float:
    started = time.time()
    while not store.llen(READY_QUEUE):
        beat.check_alive()
        if time.time() > boundary - READY_MARGIN_SECONDS:
            raise BenchError(
                f"Celery beat was not ticking {READY_MARGIN_SECONDS:g}s before the boundary "
                f"{iso(boundary)}; its log ends with:\n{tail(beat.log)}"
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
    print(f"  starting Celery beat for the boundary {iso(boundary)} UTC ...", flush=True)
    argv = [
        sys.executable, "-m", "celery", "-A", "bench.beat_vanilla", "beat", "--loglevel", "WARNING",
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
