"""What the benchmarks share: errors, statistics, a scratch database, loopback checks, /proc CPU."""

from __future__ import annotations

import contextlib
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
def scratch_database(admin_url: str, prefix: str) -> Iterator[str]:
    """A fresh PostgreSQL database for this run, dropped afterwards; yields its URL."""
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
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            admin.dispose()


def exit_on_sigterm(signum: int, _frame: object) -> None:
    """SIGTERM unwinds the finally blocks: children stopped, database dropped."""
    raise SystemExit(128 + signum)
