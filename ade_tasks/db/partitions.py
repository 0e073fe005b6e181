"""The history's monthly partitions on PostgreSQL (`runs`, `run_steps`, `run_events`, migration
0020): making the coming months' partitions ahead of time, dropping the expired ones, and what
the metrics report of them. SQLite's tables are not partitioned; every function here is a no-op
there (`is_partitioned`).

A partition holds one UTC month, named `<table>_pYYYY_MM`; a DEFAULT partition (`<table>_default`)
takes whatever no month covers, so an insert never fails for want of a partition, and a row there
is a warning (`default_rows`). The partition job (`ade_tasks.housekeeping`) keeps `AHEAD` months
made beyond the current one and drops a month of runs once it lies wholly before the retention
cutoff and holds no unfinished run, with its steps, events, approvals and idempotency keys (the
foreign keys' ON DELETE CASCADE cannot exist on a partitioned table).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.orm import Session

from ade_tasks.states import RunStatus

#: table -> its partition column
PARTITIONED = {"runs": "queued_at", "run_steps": "started_at", "run_events": "at"}
#: the children of a run, by their partition column
CHILDREN = {"run_steps": "started_at", "run_events": "at"}
#: months of partitions kept made beyond the current one
AHEAD = 3
#: how much later than its run's end a run's step or event may be stamped (clocks of hosts)
CLOCK_SLACK = timedelta(hours=1)
#: how long a DDL statement of the job waits for a lock before it gives up until the next tick
LOCK_TIMEOUT_MS = 5000
_UNFINISHED = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)
_BOUND = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


@dataclass(frozen=True)
class Partition:
    """One month's partition of a table: its name and range [start, end)."""

    name: str
    start: datetime
    end: datetime


def is_partitioned(session: Session) -> bool:
    """Is this database's history partitioned (PostgreSQL at migration 0020 or later)?"""
    if session.get_bind().dialect.name != "postgresql":
        return False
    kind = session.execute(text("SELECT relkind FROM pg_class WHERE oid = to_regclass('runs')"))
    return kind.scalar() == "p"


def month_start(moment: datetime) -> datetime:
    """The first instant of `moment`'s UTC month."""
    moment = moment.astimezone(UTC)
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def next_month(start: datetime) -> datetime:
    """The first instant of the month after the one `start` begins."""
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def partition_name(table: str, start: datetime) -> str:
    """The name of `table`'s partition of the month beginning at `start`."""
    return f"{table}_p{start.year:04d}_{start.month:02d}"


def partitions(session: Session, table: str) -> list[Partition]:
    """`table`'s monthly partitions, oldest first (the DEFAULT partition is not among them)."""
    rows = session.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:table)"
        ),
        {"table": table},
    )
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound or "")
        if match:  # not the DEFAULT partition
            start, end = (datetime.fromisoformat(value) for value in match.groups())
            found.append(Partition(name, start.astimezone(UTC), end.astimezone(UTC)))
    return sorted(found, key=lambda partition: partition.start)


def create_ahead(session: Session, now: datetime, months: int = AHEAD) -> list[str]:
    """Make every table's missing partitions from the current month to `months` ahead; the
    names made (`create_months`)."""
    last = month_start(now)
    for _ in range(months):
        last = next_month(last)
    return create_months(session, month_start(now), last)


def create_months(session: Session, first: datetime, last: datetime) -> list[str]:
    """Make every table's missing partitions of the months from `first`'s to `last`'s; the
    names made. Rows the DEFAULT partition took for such a month move into it. Each new
    partition is built apart and attached (which locks the parent less than `PARTITION OF`),
    and waits at most `LOCK_TIMEOUT_MS` for its locks: a lock timeout fails the job, which its
    next tick repeats."""
    session.execute(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))
    made = []
    for table, column in PARTITIONED.items():
        have = {partition.start for partition in partitions(session, table)}
        start = month_start(first)
        while start <= last:
            end = next_month(start)
            if start not in have:
                made.append(_attach(session, table, column, start, end))
            start = end
    return made


def _attach(session: Session, table: str, column: str, start: datetime, end: datetime) -> str:
    name = partition_name(table, start)
    bounds = {"start": start, "end": end}
    session.execute(text(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS)"))
    session.execute(
        text(
            f"WITH moved AS (DELETE FROM {table}_default WHERE {column} >= :start "
            f"AND {column} < :end RETURNING *) INSERT INTO {name} SELECT * FROM moved"
        ),
        bounds,
    )
    session.execute(
        text(
            f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM "
            f"('{start.isoformat()}') TO ('{end.isoformat()}')"
        )
    )
    return name


@dataclass(frozen=True)
class Dropped:
    """What one pass of `drop_expired` removed."""

    partitions: list[str]
    default_runs: int


def drop_expired(session: Session, cutoff: datetime) -> Dropped:
    """Drop, oldest first, every month of runs that ended before `cutoff` and holds no
    unfinished run (it stops at the first that does: history is dropped in order), with the
    runs' steps, events, approvals and keys, and every month of steps and events that no
    remaining run can own. Runs the DEFAULT partition holds that finished before `cutoff` are
    deleted row by row (the delete trigger removes their children)."""
    session.execute(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))
    dropped = []
    unfinished = ", ".join(f"'{status}'" for status in _UNFINISHED)
    for partition in partitions(session, "runs"):
        if partition.end > cutoff:
            break
        active = session.execute(
            text(f"SELECT 1 FROM {partition.name} WHERE status IN ({unfinished}) LIMIT 1")
        ).first()
        if active is not None:
            break
        _forget_runs_of(session, partition)
        session.execute(text(f"DROP TABLE {partition.name}"))
        dropped.append(partition.name)
    oldest = session.execute(text("SELECT min(queued_at) FROM runs")).scalar()
    for child in CHILDREN:
        for partition in partitions(session, child):
            # A step or event is stamped at or after its run's queued_at (give or take the hosts'
            # clocks): none of a month that ended before the oldest remaining run is one's.
            if partition.end > cutoff or (
                oldest is not None and partition.end > oldest - CLOCK_SLACK
            ):
                break
            session.execute(text(f"DROP TABLE {partition.name}"))
            dropped.append(partition.name)
    gone = session.execute(
        text(
            "DELETE FROM runs WHERE id IN (SELECT id FROM runs_default WHERE finished_at < :cutoff)"
        ),
        {"cutoff": cutoff},
    )
    return Dropped(dropped, int(getattr(gone, "rowcount", 0) or 0))


def _forget_runs_of(session: Session, partition: Partition) -> None:
    """Delete what refers to the runs of `partition` outside the partitions dropped with it:
    approvals, idempotency keys, and the steps and events stamped after the month ended (of
    the runs that ended after it, give or take the hosts' clocks)."""
    ids = f"SELECT id FROM {partition.name}"
    session.execute(text(f"DELETE FROM approvals WHERE run_id IN ({ids})"))
    session.execute(text(f"DELETE FROM run_keys WHERE run_id IN ({ids})"))
    late = f"SELECT id FROM {partition.name} WHERE finished_at >= :late OR finished_at IS NULL"
    bounds = {"end": partition.end, "late": partition.end - CLOCK_SLACK}
    for child, column in CHILDREN.items():
        session.execute(
            text(f"DELETE FROM {child} WHERE {column} >= :end AND run_id IN ({late})"), bounds
        )


def oldest_retained(session: Session) -> datetime | None:
    """The start of the oldest month of runs still held (None when not partitioned, or when
    the DEFAULT partition holds older runs: then nothing before it was dropped)."""
    if not is_partitioned(session):
        return None
    months = partitions(session, "runs")
    if not months:
        return None
    older = session.execute(
        text("SELECT 1 FROM runs_default WHERE queued_at < :start LIMIT 1"),
        {"start": months[0].start},
    ).first()
    return None if older is not None else months[0].start


@dataclass(frozen=True)
class PartitionFacts:
    """What the metrics report of the partitions: per table, how long until the last month
    made ahead ends (seconds; negative when the current month has none), and how many rows its
    DEFAULT partition holds (counted up to `DEFAULT_ROWS_COUNTED`)."""

    ahead_seconds: dict[str, float]
    default_rows: dict[str, int]


DEFAULT_ROWS_COUNTED = 10_000


def partition_facts(session: Session, now: datetime) -> PartitionFacts | None:
    """The partitions' facts, or None when the history is not partitioned."""
    if not is_partitioned(session):
        return None
    ahead, default = {}, {}
    for table in PARTITIONED:
        ahead[table] = (_covered_until(partitions(session, table), now) - now).total_seconds()
        default[table] = int(
            session.execute(
                text(
                    f"SELECT count(*) FROM (SELECT 1 FROM {table}_default "
                    f"LIMIT {DEFAULT_ROWS_COUNTED}) AS d"
                )
            ).scalar_one()
        )
    return PartitionFacts(ahead, default)


def _covered_until(months: Sequence[Partition], now: datetime) -> datetime:
    """The end of the unbroken run of partitions that covers `now` (`now` when none does)."""
    covered = now
    for partition in months:
        if partition.start <= covered < partition.end:
            covered = partition.end
    return covered
