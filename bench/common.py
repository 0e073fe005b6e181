"""What the benchmarks share: errors, statistics, a scratch database, loopback checks, /proc CPU."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy import make_url, text

from ade_tasks.db.engine import create_db_engine

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class BenchError(Exception):
    """Something broke; the benchmark cannot produce figures."""


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def machine_idle_seconds() -> float:
    """Idle + iowait time of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")


def require_loopback(url: str, what: str) -> None:
    """Benchmarks only ever talk to services on this machine."""
    host = urlsplit(url).hostname or ""
    if host not in LOOPBACK_HOSTS:
        raise BenchError(
            f"{what} {url!r} is not on a loopback address; the bench only runs locally"
        )


@contextlib.contextmanager
def scratch_database(admin_url: str, prefix: str, *, keep: bool = False) -> Iterator[str]:
    """A fresh PostgreSQL database for this run, dropped afterwards (unless `keep`: then it is
    left for EXPLAIN and its name printed); yields its URL."""
    name = f"{prefix}_{os.getpid()}"
    admin = create_db_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        admin.dispose()
        raise BenchError(f"cannot create database {name} via {admin_url}: {exc}") from exc
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        try:
            if keep:
                print(f"kept database {name}; drop it with DROP DATABASE {name}", flush=True)
            else:
                with admin.connect() as connection:
                    connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            admin.dispose()


def exit_on_sigterm(signum: int, _frame: object) -> None:
    """SIGTERM unwinds the finally blocks: children stopped, database dropped."""
    raise SystemExit(128 + signum)


#: Redis databases with one owner each: every owner flushes its own, so nobody else may use it.
REDIS_DB_OWNERS = {
    **dict.fromkeys((1, 2, 3, 4, 5, 6, 7, 8, 9, 13), "the tests (tests/support.py)"),
    10: "bench/webhooks.py",
    11: "bench/beat.py",
    12: "bench/dispatch.py",
    14: "bench/worker_memory.py",
    15: "bench/cluster.py",
}


def require_own_redis_db(url: str, owner: str) -> None:
    """Refuse a Redis URL whose database belongs to another bench or to the tests."""
    db = (urlsplit(url).path or "/0").strip("/") or "0"
    holder = REDIS_DB_OWNERS.get(int(db), owner) if db.isdigit() else owner
    if holder != owner:
        raise BenchError(
            f"Redis database {db} of {url!r} belongs to {holder}, which flushes it; "
            "pick another database"
        )


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, ...); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()
    except OSError:
        return None


def process_cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process, from /proc; None when it is gone."""
    fields = _proc_stat(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime stime


def process_tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of a process and of its children, running or already exited, from /proc.

    For servers that fork a short-lived child per connection (PostgreSQL): a child that exits
    between two samples is no longer in /proc, but its time is in its parent's cutime + cstime.
    """
    fields = _proc_stat(pid)
    if fields is None:
        return None
    ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != pid:
            child = _proc_stat(int(entry.name))
            if child is not None and int(child[1]) == pid:  # ppid
                ticks += sum(int(f) for f in child[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def parent_pid(pid: int) -> int | None:
    """The parent of a process, from /proc; None when it is gone."""
    fields = _proc_stat(pid)
    return None if fields is None else int(fields[1])


def child_pids(pid: int) -> list[int]:
    """The running children of a process (a prefork worker's pool, a server's workers)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields is not None and int(fields[1]) == pid:  # ppid
                found.append(int(entry.name))
    return found


def github_headers(secret: bytes, delivery: str, body: bytes, agent: str) -> dict[str, str]:
    """The headers GitHub sends with a `pull_request` delivery, signed over `body`."""
    return {
        "content-type": "application/json",
        "user-agent": agent,
        "x-github-event": "pull_request",
        "x-github-delivery": delivery,
        "x-hub-signature-256": "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest(),
    }
