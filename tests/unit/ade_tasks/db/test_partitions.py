"""The month arithmetic of the history partitions (`ade_tasks.db.partitions`), and that SQLite's
history is never partitioned (its jobs and checks are no-ops there)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from ade_tasks.db import partitions as partitions_db
from ade_tasks.db.partitions import Partition, month_start, next_month, partition_name


def test_a_month_starts_at_its_first_utc_instant_and_december_rolls_over() -> None:
    # Given an instant late on New Year's Eve in UTC-5 (already January in UTC)
    moment = datetime(2026, 12, 31, 20, 30, tzinfo=timezone(timedelta(hours=-5)))
    # When its month and the next are taken
    start = month_start(moment)
    # Then they are UTC months, and the partition is named after the month
    assert start == datetime(2027, 1, 1, tzinfo=UTC)
    assert next_month(datetime(2026, 12, 1, tzinfo=UTC)) == datetime(2027, 1, 1, tzinfo=UTC)
    assert partition_name("runs", datetime(2026, 3, 1, tzinfo=UTC)) == "runs_p2026_03"


def test_the_time_covered_ends_at_the_first_missing_month() -> None:
    # Given this month, the next, and the one after a gap
    months = [datetime(2026, m, 1, tzinfo=UTC) for m in (11, 12)] + [
        datetime(2027, 2, 1, tzinfo=UTC)
    ]
    held = [Partition(partition_name("runs", m), m, next_month(m)) for m in months]
    now = datetime(2026, 11, 20, tzinfo=UTC)
    # When the covered time is measured, and with no partition for now
    covered = partitions_db._covered_until(held, now)
    uncovered = partitions_db._covered_until(held[2:], now)
    # Then it stops before the gap, and is now itself when nothing covers now
    assert covered == datetime(2027, 1, 1, tzinfo=UTC)
    assert uncovered == now


def test_sqlite_history_is_not_partitioned() -> None:
    with Session(create_engine("sqlite://")) as session:
        assert not partitions_db.is_partitioned(session)
        assert partitions_db.oldest_retained(session) is None
        assert partitions_db.partition_facts(session, datetime.now(UTC)) is None
