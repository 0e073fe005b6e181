"""A beat's clock follows the database's: the offset, the anchoring, the skew log, and what the
scheduler stamps and fires by it (on SQLite, with the database's readings played by the test)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from ade_tasks import clock
from ade_tasks.clock import utcnow
from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db.clock import ClockReading, DatabaseClock, read_clock
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.schedule.scheduler import Scheduler
from ade_tasks.testing import InMemorySender
from tests.scheduler_support import write_minutely_rules

#: The database's time in these tests: days away from this machine's, so a timestamp taken from
#: this machine's clock cannot pass for it.
DATABASE_NOW = datetime(2026, 11, 30, 10, 0, 59, 500_000, tzinfo=UTC)


@pytest.fixture(autouse=True)
def own_clock() -> Iterator[None]:
    """Every test starts and ends on this machine's clock (following is process-wide)."""
    clock.unfollow()
    yield
    clock.unfollow()


def reading(database: datetime, offset: float) -> ClockReading:
    """What `read_clock` returns from a database whose clock reads `database` now, while this
    machine's reads `offset` seconds ahead of it."""
    return ClockReading(database, database + timedelta(seconds=offset), time.monotonic())


def test_the_offset_is_this_machines_clock_minus_the_databases() -> None:
    assert reading(DATABASE_NOW, 90.0).offset == pytest.approx(90.0)
    assert reading(DATABASE_NOW, -90.0).offset == pytest.approx(-90.0)


def test_a_fast_machine_follows_the_database_and_is_never_ahead_of_it() -> None:
    # given a database whose clock is 90 s behind this machine's
    database = DatabaseClock(lambda: reading(datetime.now(UTC) - timedelta(seconds=90), 90.0), "b")
    # when the clock is checked
    database.check()
    # then utcnow() is the database's time, from the moment its answer arrived on
    before = datetime.now(UTC) - timedelta(seconds=90)
    now = utcnow()
    assert database.offset == pytest.approx(90.0)
    assert before - timedelta(seconds=1) < now <= datetime.now(UTC) - timedelta(seconds=90)


def test_utcnow_runs_on_the_monotonic_clock_from_the_reading() -> None:
    clock.follow(DATABASE_NOW, time.monotonic())
    first = utcnow()
    time.sleep(0.05)
    second = utcnow()
    assert DATABASE_NOW <= first < second < DATABASE_NOW + timedelta(seconds=1)
    assert second - first >= timedelta(seconds=0.05)
    clock.unfollow()
    assert abs(utcnow() - datetime.now(UTC)) < timedelta(seconds=1)


def test_a_naive_database_time_is_refused() -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        clock.follow(datetime(2026, 11, 30, 10, 0), time.monotonic())


def test_a_skew_is_logged_once_when_seen_again_when_it_moves_and_when_it_is_gone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    offsets = iter([90.0, 90.4, 89.8, 92.0, 0.5, 0.3, -3.0, -3.5])
    database = DatabaseClock(
        lambda: reading(DATABASE_NOW, next(offsets)), "beat-1", every=timedelta(0)
    )
    with caplog.at_level(logging.INFO, logger="ade_tasks.db.clock"):
        for _ in range(8):
            database.check()
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in said] == ["WARNING", "WARNING", "INFO", "WARNING"]
    assert said[0][1].startswith("beat-1: this machine's clock is 90.0 s ahead of the database's")
    assert "fix this machine's time synchronisation (NTP)" in said[0][1]
    assert "92.0 s ahead of" in said[1][1]
    assert (
        said[2][1] == "beat-1: this machine's clock is back within 2 s of the database's (+0.500 s)"
    )
    assert "3.0 s behind the database's" in said[3][1]
    assert database.offset == pytest.approx(-3.5)


def test_an_offset_within_two_seconds_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    database = DatabaseClock(lambda: reading(DATABASE_NOW, 1.9), "beat-1", every=timedelta(0))
    with caplog.at_level(logging.INFO, logger="ade_tasks.db.clock"):
        database.check()
        database.check()
    assert caplog.records == []
    assert database.offset == pytest.approx(1.9)


def test_the_database_is_read_again_only_after_every() -> None:
    reads: list[ClockReading] = []

    def read() -> ClockReading:
        reads.append(reading(DATABASE_NOW, 0.0))
        return reads[-1]

    database = DatabaseClock(read, "beat-1", every=timedelta(seconds=0.2))
    database.check()
    database.check()
    assert len(reads) == 1
    time.sleep(0.25)
    database.check()
    assert len(reads) == 2


def test_on_sqlite_the_databases_clock_is_this_machines(session_factory: SessionFactory) -> None:
    assert read_clock(session_factory) is None
    clock.follow(DATABASE_NOW, time.monotonic())  # left over from a database read before
    database = DatabaseClock(lambda: read_clock(session_factory), "beat-1")
    database.check()
    assert database.offset == 0.0
    assert abs(utcnow() - datetime.now(UTC)) < timedelta(seconds=1)


def test_slots_fire_and_are_stamped_by_the_database_clock(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    # given a minutely rule, and a database whose clock is half a second before 10:01
    write_minutely_rules(session_factory, rules_dir, 1)
    clock.follow(DATABASE_NOW, time.monotonic())
    beat = Scheduler(session_factory, sender, "beat-1")
    # when the beat ticks then, 10:01 is not due, whatever this machine's clock says
    assert beat.tick().fired == {}
    # and when the database's clock passes 10:01
    clock.follow(DATABASE_NOW + timedelta(seconds=0.5), time.monotonic())
    fired = beat.tick().fired
    # then the slot fires, and its claim and its run carry the database's time
    assert [key.slot for key in fired] == [datetime(2026, 11, 30, 10, 1, tzinfo=UTC)]
    with session_factory() as session:
        (claimed_at,) = session.scalars(select(ScheduleOccurrenceRow.claimed_at)).all()
        (queued_at,) = session.scalars(select(RunRow.queued_at)).all()
    for stamp in (claimed_at, queued_at):
        assert DATABASE_NOW + timedelta(seconds=0.5) <= stamp < DATABASE_NOW + timedelta(seconds=2)


def test_a_beat_fires_nothing_before_it_has_read_the_databases_clock(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    from ade_tasks.settings import Settings
    from ade_workers.celery.app import create_celery_app
    from ade_workers.celery.beat import TICK_SECONDS, DatabaseScheduler

    # given a beat whose read of the database's clock fails
    write_minutely_rules(session_factory, rules_dir, 1)
    beat = DatabaseScheduler(create_celery_app(Settings(), session_factory=session_factory))
    broken = beat._db_clock._read

    def unreadable() -> ClockReading | None:
        raise ConnectionError("the database's clock did not answer")

    beat._db_clock._read = unreadable
    # when it ticks, it claims nothing (no slot, no housekeeping job) and tries again soon
    assert beat.tick() == TICK_SECONDS
    with session_factory() as session:
        assert session.scalars(select(ScheduleOccurrenceRow)).all() == []
    # and once the clock answers, it works, and its heartbeat says its offset (0: SQLite)
    beat._db_clock._read = broken
    beat.tick()
    with session_factory() as session:
        assert session.scalars(select(ScheduleOccurrenceRow)).all() != []
        beats = [h for h in heartbeats_db.recent(session) if h.kind == heartbeats_db.BEAT]
    (beat_heartbeat,) = beats
    assert beat_heartbeat.clock_offset == 0.0
