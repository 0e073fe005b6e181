"""The DB-claimed scheduler on SQLite with a clock the test moves (several beats, one database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from ade_tasks.clock import utcnow
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.occurrences import OccurrenceKey
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.db.shard_tables import ScheduleShardRow
from ade_tasks.schedule.scheduler import Scheduler
from ade_tasks.states import OccurrenceOutcome
from ade_tasks.testing import InMemorySender
from tests.conftest import write_rule
from tests.scheduler_support import FakeClock, write_minutely_rules
from tests.unit.conftest import schedule_rule


def runs_by_rule_and_slot(session_factory: SessionFactory) -> list[tuple[str, str]]:
    with session_factory() as session:
        rows = session.execute(select(RunRow.rule_id, RunRow.trigger)).all()
    return sorted((rule_id, trigger["slot"]) for rule_id, trigger in rows)


def beats(session_factory: SessionFactory, clock: FakeClock, count: int) -> list[Scheduler]:
    return [
        Scheduler(session_factory, InMemorySender(), f"beat-{n}", clock=clock) for n in range(count)
    ]


def test_two_beats_fire_each_minute_once(session_factory: SessionFactory, rules_dir: Path) -> None:
    write_minutely_rules(session_factory, rules_dir, 3)
    clock = FakeClock()
    schedulers = beats(session_factory, clock, 2)
    for _ in range(31):  # 10:00:05 to 10:10:05, a tick every 20 s on both beats
        for beat in schedulers:
            beat.tick()
        clock.advance(20)
    fired = runs_by_rule_and_slot(session_factory)
    assert len(fired) == 30 and len(set(fired)) == 30
    with session_factory() as session:
        duplicates = session.scalar(select(func.sum(ScheduleOccurrenceRow.duplicate_claims)))
        losers = session.scalar(select(func.sum(ScheduleShardRow.losers)))
        outcomes = set(session.scalars(select(ScheduleOccurrenceRow.outcome)))
    # Both beats claimed each minute's one shard; the second found it taken and claimed none of
    # its slots.
    assert (losers, duplicates) == (10, 0)
    assert outcomes == {"fired"}


def test_rule_edits_and_disabling_are_picked_up_without_a_restart(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    schedule_rule(session_factory, rules_dir, "edited", "*/2 * * * *")
    clock = FakeClock()
    beat = Scheduler(session_factory, InMemorySender(), "beat", clock=clock)
    beat.tick()
    clock.advance(120)
    assert len(beat.tick().fired) == 1
    schedule_rule(session_factory, rules_dir, "edited", "*/2 * * * *", enabled=False)
    clock.advance(120)
    report = beat.tick()
    assert report.fired == {} and report.skipped == {}


def test_an_edit_between_claim_and_fire_does_not_fire_the_old_schedule(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    schedule_rule(session_factory, rules_dir, "edited", "* * * * *")
    clock = FakeClock()
    beat = Scheduler(
        session_factory, InMemorySender(), "beat", clock=clock, refresh_every=timedelta(hours=1)
    )
    beat.tick()
    # The rule changes after this beat read it; its next tick still holds the old cron.
    schedule_rule(session_factory, rules_dir, "edited", "0 3 * * *")
    clock.advance(60)
    report = beat.tick()
    assert report.fired == {}
    ((key, reason),) = report.skipped.items()
    assert key.cron == "* * * * *" and "no longer has schedule trigger #0" in reason
    with session_factory() as session:
        (row,) = occ_db.list_for_rule(session, "edited")
    assert (row.outcome, row.run_id) == ("skipped", None) and "edited or removed" in row.reason


def test_catch_up_fires_within_the_window_oldest_first_and_records_older_slots_as_missed(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_minutely_rules(session_factory, rules_dir, 1, extra=", catchup_window: 5m")
    clock = FakeClock()
    before = Scheduler(session_factory, InMemorySender(), "before", clock=clock)
    before.tick()
    clock.advance(60)
    assert len(before.tick().fired) == 1  # 10:01
    clock.advance(10 * 60)  # every beat is down until 10:11:05
    report = Scheduler(session_factory, InMemorySender(), "after", clock=clock).tick()
    fired = sorted(k.slot.strftime("%H:%M") for k in report.fired)
    missed = sorted(k.slot.strftime("%H:%M") for k in report.missed)
    # At 10:11:05 a 5-minute window reaches back to 10:06:05.
    assert fired == ["10:07", "10:08", "10:09", "10:10", "10:11"]
    assert missed == ["10:02", "10:03", "10:04", "10:05", "10:06"]
    with session_factory() as session:
        queued = session.scalars(select(RunRow.trigger).order_by(RunRow.queued_at)).all()
    assert [t["slot"][11:16] for t in queued] == ["10:01", *fired]  # oldest first


def test_without_a_catch_up_window_a_long_outage_only_records_missed_slots(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_minutely_rules(session_factory, rules_dir, 1)
    clock = FakeClock()
    before = Scheduler(session_factory, InMemorySender(), "a", clock=clock)
    before.tick()
    clock.advance(60)
    assert len(before.tick().fired) == 1  # 10:01
    clock.advance(5 * 60)
    report = Scheduler(session_factory, InMemorySender(), "b", clock=clock).tick()
    assert [k.slot.strftime("%H:%M") for k in sorted(report.fired)] == ["10:06"]  # on time
    assert len(report.missed) == 4


def test_a_claim_left_by_a_crashed_beat_is_fired_once_by_another(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_minutely_rules(session_factory, rules_dir, 1)
    slot = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    key = OccurrenceKey("every-minute-0000", 0, "* * * * *", slot)
    with session_factory.begin() as session:
        assert occ_db.claim(session, [key], "crashed-beat") == [key]
        # ... two real minutes ago, and the beat died before recording what came of it.
        session.execute(
            update(ScheduleOccurrenceRow).values(claimed_at=utcnow() - timedelta(minutes=2))
        )
    clock = FakeClock(slot + timedelta(minutes=2))
    survivor = Scheduler(session_factory, InMemorySender(), "survivor", clock=clock)
    assert key in survivor.tick().fired  # with 10:01 and 10:02, which are still on time
    clock.advance(60)
    assert key not in survivor.tick().fired
    assert [
        s for r, s in runs_by_rule_and_slot(session_factory) if s.startswith("2026-11-30T10:00")
    ] == ["2026-11-30T10:00:00+00:00"]
    with session_factory() as session:
        row = session.scalars(
            select(ScheduleOccurrenceRow).where(ScheduleOccurrenceRow.slot == slot)
        ).one()
    assert row.outcome == OccurrenceOutcome.FIRED and row.run_id


def test_a_new_rule_starts_at_its_next_slot(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_rule(rules_dir, "x.yaml", "")
    (rules_dir / "x.yaml").unlink()
    write_minutely_rules(session_factory, rules_dir, 1)
    clock = FakeClock()  # 10:00:05: the 10:00 slot began before the rule was seen
    beat = Scheduler(session_factory, InMemorySender(), "beat", clock=clock)
    assert beat.tick().fired == {}
    clock.advance(55)
    assert [k.slot.strftime("%H:%M") for k in beat.tick().fired] == ["10:01"]


def test_a_rule_disabled_between_claim_and_fire_does_not_run(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    schedule_rule(session_factory, rules_dir, "flip", "* * * * *")
    clock = FakeClock()
    beat = Scheduler(
        session_factory, InMemorySender(), "beat", clock=clock, refresh_every=timedelta(hours=1)
    )
    beat.tick()
    schedule_rule(session_factory, rules_dir, "flip", "* * * * *", enabled=False)
    clock.advance(60)
    report = beat.tick()  # its cached view still says enabled; the fire re-checks
    assert report.fired == {}
    assert "rule 'flip' is disabled" in next(iter(report.skipped.values()))
    assert runs_by_rule_and_slot(session_factory) == []


def test_a_tick_between_slots_looks_at_no_trigger_and_the_next_slot_is_known(
    session_factory: SessionFactory, rules_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ade_tasks.cron.slots import CronCursor

    write_minutely_rules(session_factory, rules_dir, 3)
    clock = FakeClock()  # 10:00:05
    beat = Scheduler(session_factory, InMemorySender(), "beat", clock=clock)
    beat.tick()
    assert beat.next_slot() == datetime(2026, 11, 30, 10, 1, tzinfo=UTC)

    asked: list[datetime] = []
    real_due = CronCursor.due

    def counting_due(self: CronCursor, until: datetime) -> list[datetime]:
        asked.append(until)
        return real_due(self, until)

    monkeypatch.setattr(CronCursor, "due", counting_due)
    clock.advance(30)  # 10:00:35: nothing due
    assert beat.tick().fired == {} and asked == []
    clock.advance(30)  # 10:01:05: all three
    assert len(beat.tick().fired) == 3 and len(asked) == 3
    assert beat.next_slot() == datetime(2026, 11, 30, 10, 2, tzinfo=UTC)


def test_an_edited_cron_fires_on_its_new_slots_only(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    schedule_rule(session_factory, rules_dir, "edited", "* * * * *")
    clock = FakeClock()  # 10:00:05
    beat = Scheduler(session_factory, InMemorySender(), "beat", clock=clock)
    beat.tick()
    schedule_rule(session_factory, rules_dir, "edited", "*/5 * * * *")
    fired = []
    for _ in range(10):  # 10:01:05 to 10:10:05, with a refresh between
        clock.advance(60)
        report = beat.tick()
        fired += sorted(key.slot.minute for key in [*report.fired, *report.skipped])
    assert fired == [5, 10]  # the old every-minute cursor, still filed, never fired again
