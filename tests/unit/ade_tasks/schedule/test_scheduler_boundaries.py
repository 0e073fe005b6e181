"""Error boundaries of the beat: one rule whose schedule cannot be evaluated (stored before the
validation that would refuse it existed) is that rule's problem; every other schedule fires, and
the housekeeping jobs run whatever the schedules do."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ade_tasks.clock import utcnow
from ade_tasks.cron.slots import ScheduleError, ScheduleSpec
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RuleRow, ScheduleOccurrenceRow
from ade_tasks.housekeeping import HOUSEKEEPING
from ade_tasks.rules.loader import content_hash
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.schedules import rule_schedules
from ade_tasks.schedule.scheduler import Scheduler
from ade_tasks.states import OccurrenceOutcome
from ade_tasks.testing import InMemorySender
from tests.scheduler_support import FakeClock, write_minutely_rules

ACTIONS = {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]}


def store_rule(session_factory: SessionFactory, document: dict[str, Any]) -> None:
    """Insert a rule row as an older version stored it: no validation on the way in."""
    now = utcnow()
    with session_factory.begin() as session:
        session.add(
            RuleRow(
                id=document["id"],
                version=1,
                source="api",
                source_file=None,
                content_hash=content_hash(document),
                enabled=True,
                document=document,
                trust_state="trusted",
                source_hash=None,
                created_at=now,
                updated_at=now,
            )
        )


IMPOSSIBLE = {
    "id": "february-30",
    "triggers": [
        {"type": "schedule", "cron": "0 0 30 2 *"},
        {"type": "schedule", "cron": "* * * * *"},
    ],
    "execution": ACTIONS,
    "guardrails": {"overlap": "allow-all"},
}


def test_an_impossible_cron_is_its_rules_problem_and_every_other_schedule_fires(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_minutely_rules(session_factory, rules_dir, 2)
    store_rule(session_factory, IMPOSSIBLE)
    clock = FakeClock()
    beat = Scheduler(session_factory, InMemorySender(), "beat", clock=clock)

    beat.tick()
    clock.advance(60)
    report = beat.tick()

    fired = sorted((key.rule_id, key.trigger_index) for key in report.fired)
    assert fired == [("every-minute-0000", 0), ("every-minute-0001", 0), ("february-30", 1)]
    (problem,) = beat.problems.items()
    assert problem[0] == ("february-30", 0)
    assert "never fires" in problem[1] and "'0 0 30 2 *'" in problem[1]


def test_a_stored_document_this_version_cannot_read_does_not_stop_the_others(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_minutely_rules(session_factory, rules_dir, 1)
    store_rule(session_factory, {"id": "unreadable", "triggers": "every day", "execution": {}})
    clock = FakeClock()
    beat = Scheduler(session_factory, InMemorySender(), "beat", clock=clock)

    beat.tick()
    clock.advance(60)

    assert [key.rule_id for key in beat.tick().fired] == ["every-minute-0000"]
    (((rule_id, index), reason),) = beat.problems.items()
    assert (rule_id, index) == ("unreadable", None) and "cannot be read" in reason


def test_a_trigger_that_fails_while_due_is_dropped_alone(
    session_factory: SessionFactory, rules_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_minutely_rules(session_factory, rules_dir, 2)
    clock = FakeClock()
    beat = Scheduler(session_factory, InMemorySender(), "beat", clock=clock)
    beat.tick()
    broken = next(c for k, c in beat._cursors.items() if k[0] == "every-minute-0000")

    def fail(_until: object) -> list[object]:
        raise ScheduleError("the cursor broke")

    monkeypatch.setattr(broken, "due", fail)
    clock.advance(60)

    assert [key.rule_id for key in beat.tick().fired] == ["every-minute-0001"]
    assert beat.problems == {("every-minute-0000", 0): "the cursor broke"}


def test_an_occurrence_that_cannot_be_dispatched_is_skipped_with_the_reason_alone(
    session_factory: SessionFactory, rules_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ade_tasks.schedule.scheduler as scheduler_module

    write_minutely_rules(session_factory, rules_dir, 3)
    real = scheduler_module.dispatch_many

    def dispatch_many(factory: Any, sender: Any, requests: Any, **options: Any) -> Any:
        if any(rule_id == "every-minute-0001" for rule_id, _ in requests):
            raise KeyError("a bug met by this rule only")
        return real(factory, sender, requests, **options)

    monkeypatch.setattr(scheduler_module, "dispatch_many", dispatch_many)
    clock = FakeClock()
    beat = Scheduler(session_factory, InMemorySender(), "beat", clock=clock)
    beat.tick()
    clock.advance(60)

    report = beat.tick()

    assert sorted(key.rule_id for key in report.fired) == ["every-minute-0000", "every-minute-0002"]
    with session_factory() as session:
        row = session.scalars(
            select(ScheduleOccurrenceRow).where(
                ScheduleOccurrenceRow.rule_id == "every-minute-0001"
            )
        ).one()
    assert row.outcome == "skipped" and "could not be dispatched: KeyError" in (row.reason or "")


def test_a_problem_clears_when_the_rule_is_fixed(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    store_rule(session_factory, IMPOSSIBLE)
    clock = FakeClock()
    beat = Scheduler(session_factory, InMemorySender(), "beat", clock=clock)
    beat.tick()
    assert ("february-30", 0) in beat.problems
    with session_factory.begin() as session:
        session.get(RuleRow, "february-30").enabled = False  # type: ignore[union-attr]
    clock.advance(10)
    beat.tick()
    assert beat.problems == {}


def test_rule_schedules_give_each_trigger_its_times_or_its_problem() -> None:
    rule = Rule.model_validate(IMPOSSIBLE)
    bad, good = rule_schedules(rule, utcnow(), 3)
    assert bad.times == [] and bad.problem and "never fires" in bad.problem
    assert len(good.times) == 3 and good.problem is None


def test_an_unknown_stored_time_zone_is_a_schedule_error() -> None:
    with pytest.raises(ScheduleError, match="time zone"):
        from ade_tasks.cron.slots import CronCursor

        CronCursor(ScheduleSpec("r", 0, "* * * * *", "Mars/Olympus_Mons"), utcnow())


def test_the_beat_runs_housekeeping_when_the_schedules_fail(
    session_factory: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ade_tasks.settings import Settings
    from ade_workers.celery.app import create_celery_app
    from ade_workers.celery.beat import DatabaseScheduler

    app = create_celery_app(Settings(), session_factory=session_factory)
    beat = DatabaseScheduler(app)

    def down() -> None:
        raise RuntimeError("schedules are broken")

    monkeypatch.setattr(beat._schedules, "tick", down)
    beat.tick()

    with session_factory() as session:
        jobs = session.scalars(
            select(ScheduleOccurrenceRow.cron).where(
                ScheduleOccurrenceRow.rule_id == HOUSEKEEPING,
                ScheduleOccurrenceRow.outcome == OccurrenceOutcome.FIRED.value,
            )
        ).all()
    assert "recover" in jobs and "prune" in jobs


def test_the_beat_fires_schedules_when_housekeeping_fails(
    session_factory: SessionFactory, rules_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ade_tasks.settings import Settings
    from ade_workers.celery.app import create_celery_app
    from ade_workers.celery.beat import DatabaseScheduler

    write_minutely_rules(session_factory, rules_dir, 1)
    app = create_celery_app(Settings(), session_factory=session_factory)
    beat = DatabaseScheduler(app)
    clock = FakeClock()
    beat._schedules._clock = clock

    def down(_now: object) -> None:
        raise RuntimeError("housekeeping is broken")

    monkeypatch.setattr(beat._housekeeping, "tick", down)
    beat.tick()
    clock.advance(60)
    beat.tick()

    with session_factory() as session:
        fired = session.scalars(
            select(ScheduleOccurrenceRow.rule_id).where(
                ScheduleOccurrenceRow.outcome == OccurrenceOutcome.FIRED.value
            )
        ).all()
    assert fired == ["every-minute-0000"]


def test_the_beat_sleeps_until_just_after_the_next_slot(
    session_factory: SessionFactory, rules_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ade_tasks.settings import Settings
    from ade_workers.celery.app import create_celery_app
    from ade_workers.celery.beat import SLOT_WAKE_MARGIN, TICK_SECONDS, DatabaseScheduler

    write_minutely_rules(session_factory, rules_dir, 1)
    app = create_celery_app(Settings(), session_factory=session_factory)
    beat = DatabaseScheduler(app)
    clock = FakeClock(datetime(2026, 11, 30, 10, 0, 59, 600_000, tzinfo=UTC))
    beat._schedules._clock = clock

    assert beat.tick() == pytest.approx(0.4 + SLOT_WAKE_MARGIN)  # not a whole tick later
    clock.advance(0.5)
    assert beat.tick() == TICK_SECONDS  # it fired 10:01; 10:02 is more than a tick away

    def down() -> None:
        raise RuntimeError("the database is away")

    clock.advance(60)
    monkeypatch.setattr(beat, "_fire_schedules", down)
    assert beat.tick() == TICK_SECONDS  # a slot it could not take: retried at the usual pace
