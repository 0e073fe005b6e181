"""Parsing many rules files in worker processes: a sync of 100,000 files spends most of its
time in YAML and pydantic, which one Python process runs on one core.

Measured on the 2-core development machine (2026-12-02): a worker process starts in about
0.4 s (a fresh interpreter importing the rule models) and parses a rule file in 0.5-0.8 ms, so
the pool pays from about 2,000 files on (`POOL_FROM`); fewer are parsed in the calling process.
Workers are spawned, not forked: the caller may hold database connections and threads (the
`dev` watcher) that a forked child must not inherit.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from typing import TypeVar

from ade_tasks.rules.gc_pause import paused_gc

log = logging.getLogger(__name__)

#: Files to parse from which a pool pays for its start-up (see the module docstring).
POOL_FROM = 3_000
#: Files per task sent to a worker: large enough that a task's overhead is small, small enough
#: that the workers finish together.
CHUNK = 250
#: The most worker processes, whatever the machine.
MAX_WORKERS = 8

Item = TypeVar("Item")
Result = TypeVar("Result")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def map_in_pool(
    parse: Callable[[Item], Result], items: Sequence[Item], *, pool_from: int = POOL_FROM
) -> list[Result]:
    """`[parse(item) for item in items]`, in worker processes when there are at least
    `pool_from` items and more than one core; `parse` must be a module-level function (it is
    pickled) that never raises for a bad item (it returns the item's problems instead).

    A pool that fails (a worker killed, a worker of another release) is logged and its items
    parsed here instead, so a sync never loses a file to it.
    """
    workers = min(usable_cores(), MAX_WORKERS)
    if len(items) < pool_from or workers < 2:
        return [parse(item) for item in items]
    chunks = [items[start : start + CHUNK] for start in range(0, len(items), CHUNK)]
    context = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            done = pool.map(partial(_parse_chunk, parse), chunks)
            return [result for chunk in done for result in chunk]
    except Exception:  # `parse` never raises, so the pool itself failed
        # (BrokenProcessPool: a worker killed; or a worker that imported another release)
        log.exception("the rule-parsing pool failed; parsing the %d files here", len(items))
        return [parse(item) for item in items]


def _parse_chunk(parse: Callable[[Item], Result], chunk: Sequence[Item]) -> list[Result]:
    with paused_gc():
        return [parse(item) for item in chunk]
