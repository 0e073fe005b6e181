"""The cluster simulation's sampler: CPU by process and component, broker queue depths and the
runs waiting in the database, every few seconds, in a thread beside the load generator.

CPU comes from /proc (utime + stime): a server's whole tree (its reaped children included, so
the `true` commands a worker's pool runs count for that worker) for the component figure, and
each running process on its own for the one-core check. PostgreSQL is counted as the backends
of the scratch database (pg_stat_activity), never the whole server, which other sessions on
a shared machine use too; a backend keeps its last figure after it exits.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import redis
from sqlalchemy import Engine, text

from bench.cluster_verdict import Interval
from bench.common import (
    child_pids,
    machine_idle_seconds,
    process_cpu_seconds,
    process_tree_cpu_seconds,
)

THIS_PROCESS = "load generator + sampler (this process)"
OTHER = "other processes on the machine"
DB_QUEUED = "runs queued in the database"
UNACKED = "unacked"  # kombu's Redis hash of messages a worker holds but has not acked

_BACKENDS = text(
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
    " AND pid <> pg_backend_pid()"
)
_QUEUED = text("SELECT count(*) FROM runs WHERE status = 'queued'")


@dataclass
class Snapshot:
    """One sample: when, CPU seconds so far, and how deep the queues were."""

    at: float  # time.monotonic()
    idle: float
    ours: float
    components: dict[str, float]
    processes: dict[str, float]
    queues: dict[str, int]


@dataclass
class Probe:
    """Samples `roots` (component -> the pids whose trees it is) plus the database and Redis."""

    roots: Mapping[str, Sequence[int]]
    engine: Engine
    store: redis.Redis
    redis_pid: int
    snapshots: list[Snapshot] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _backends: dict[int, float] = field(default_factory=dict)

    def take(self) -> Snapshot:
        components: dict[str, float] = {}
        processes: dict[str, float] = {}
        for name, pids in self.roots.items():
            total = 0.0
            for pid in pids:
                total += process_tree_cpu_seconds(pid) or 0.0
                for proc in (pid, *child_pids(pid)):
                    cpu = process_cpu_seconds(proc)
                    if cpu is not None:
                        processes[_label(name, pid, proc, len(pids))] = cpu
            components[name] = total
        with self.engine.connect() as connection:
            backends = connection.execute(_BACKENDS).scalars().all()
            queued = int(connection.execute(_QUEUED).scalar_one())
        for pid in backends:
            cpu = process_cpu_seconds(pid)
            if cpu is not None:
                self._backends[pid] = cpu
                processes[f"postgres backend {pid}"] = cpu
        components["postgres"] = sum(self._backends.values())
        components["redis"] = process_cpu_seconds(self.redis_pid) or 0.0
        processes["redis"] = components["redis"]
        queues = self.queue_depths()
        queues[DB_QUEUED] = queued
        return Snapshot(
            time.monotonic(), machine_idle_seconds(), time.process_time(), components,
            processes, queues,
        )  # fmt: skip

    def queue_depths(self) -> dict[str, int]:
        """LLEN of every `ade.*` list (kombu's priority lists summed into their queue) and the
        number of messages delivered to a worker but not acked yet."""
        depths: dict[str, int] = {}
        for key in self.store.scan_iter(match="ade.*", count=1000):
            if self.store.type(key) == b"list":
                name = key.decode(errors="replace").partition("\x06")[0]
                depths[name] = depths.get(name, 0) + int(self.store.llen(key))
        depths[UNACKED] = int(self.store.hlen(UNACKED))
        return depths

    def run(self, every: float, stop: threading.Event, limit: int) -> None:
        """Sample every `every` seconds until `stop` is set (at most `limit` samples)."""
        for _ in range(limit):
            started = time.monotonic()
            try:
                self.snapshots.append(self.take())
            except Exception as exc:  # a sample lost is reported, not fatal to the load
                self.errors.append(f"{type(exc).__name__}: {exc}")
            if stop.wait(max(0.0, every - (time.monotonic() - started))):
                return


def _label(component: str, root: int, pid: int, roots: int) -> str:
    base = component if roots == 1 else f"{component} {root}"
    return base if pid == root else f"{base} child {pid}"


def intervals(snapshots: Sequence[Snapshot], start: float, cores: int) -> list[Interval]:
    """CPU between consecutive snapshots, as cores used; `at` counted from `start`."""
    found = []
    for before, after in itertools.pairwise(snapshots):
        seconds = after.at - before.at
        if seconds <= 0:
            continue
        per_process = {
            name: (cpu - before.processes[name]) / seconds
            for name, cpu in after.processes.items()
            if name in before.processes
        }
        spent = spent_between(before, after, cores)
        busy = 1 - spent["idle"] / (cores * seconds)
        by_component = {k: v / seconds for k, v in spent.items() if k != "idle"}
        foreign = spent[OTHER] / (cores * seconds)
        found.append(Interval(after.at - start, seconds, per_process, busy, by_component, foreign))
    return found


def spent_between(before: Snapshot, after: Snapshot, cores: int) -> dict[str, float]:
    """CPU seconds per component between two snapshots, then this process, the rest of the
    machine and idle."""
    spent = {name: cpu - before.components.get(name, 0.0) for name, cpu in after.components.items()}
    spent[THIS_PROCESS] = after.ours - before.ours
    spent["idle"] = after.idle - before.idle
    capacity = cores * (after.at - before.at)
    spent[OTHER] = max(0.0, capacity - sum(spent.values()))
    return spent


def queue_series(snapshots: Sequence[Snapshot], start: float) -> dict[str, list[tuple[float, int]]]:
    """Each queue's depth over time: name -> [(seconds from `start`, depth)]."""
    names = sorted({name for s in snapshots for name in s.queues})
    return {
        name: [(s.at - start, s.queues.get(name, 0)) for s in snapshots if s.at >= start]
        for name in names
    }
