"""Several beats against one PostgreSQL: every occurrence is fired exactly once."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.runs.dispatch import InMemorySender
from ade_tasks.schedule.scheduler import Scheduler
from tests.scheduler_support import FakeClock, write_minutely_rules


@pytest.fixture
def factories(database_url: str) -> Iterator[list[SessionFactory]]:
    """One engine per beat, as separate beat processes would have."""
    engines = [create_db_engine(database_url) for _ in range(4)]
    yield [create_session_factory(engine) for engine in engines]
    for engine in engines:
        engine.dispose()


def run_beats(beats: list[Scheduler], clock: FakeClock, ticks: int, step: float) -> None:
    """Tick all beats at the same moments, concurrently, `ticks` times."""
    errors: list[BaseException] = []

    def tick(beat: Scheduler) -> None:
        try:
            beat.tick()
        except BaseException as exc:  # surfaced below, so a failing beat fails the test
            errors.append(exc)

    for _ in range(ticks):
        threads = [threading.Thread(target=tick, args=(beat,)) for beat in beats]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors[0]
        clock.advance(step)


def shuffled_beat(factory: SessionFactory, name: str, clock: object, seed: int) -> Scheduler:
    beat = Scheduler(factory, InMemorySender(), name, clock=clock)  # type: ignore[arg-type]
    original = beat.refresh

    def refresh_in_random_order(now):  # type: ignore[no-untyped-def]
        original(now)
        items = list(beat._cursors.items())
        random.Random(seed).shuffle(items)
        beat._cursors = dict(items)

    beat.refresh = refresh_in_random_order  # type: ignore[method-assign]
    return beat


def test_three_beats_200_rules_ten_minutes_exactly_once(
    factories: list[SessionFactory], tmp_path: Path
) -> None:
    write_minutely_rules(factories[0], tmp_path / "rules", 200)
    clock = FakeClock()
    skewed = FakeClock(skew=timedelta(seconds=30))

    def skewed_now():  # type: ignore[no-untyped-def]
        return clock.now + skewed.skew

    beats = [
        shuffled_beat(factories[1], "beat-a", clock, seed=1),
        shuffled_beat(factories[2], "beat-b", clock, seed=2),
        shuffled_beat(factories[3], "beat-c-30s-ahead", skewed_now, seed=3),
    ]
    run_beats(beats, clock, ticks=31, step=20)  # 10:00:05 .. 10:10:05

    with factories[0]() as session:
        runs = session.execute(select(RunRow.rule_id, RunRow.trigger)).all()
        pairs = {(rule_id, trigger["slot"]) for rule_id, trigger in runs}
        outcomes = session.execute(
            select(ScheduleOccurrenceRow.outcome, func.count()).group_by(
                ScheduleOccurrenceRow.outcome
            )
        ).all()
        duplicates = session.scalar(select(func.sum(ScheduleOccurrenceRow.duplicate_claims)))
    assert len(runs) == 2000 and len(pairs) == 2000  # 200 rules x 10 slots, none twice
    assert dict(outcomes) == {"fired": 2000}
    assert duplicates == 4000  # the two later beats claimed every slot too, and lost


def test_three_beats_racing_on_the_same_clock_fire_each_slot_once(
    factories: list[SessionFactory], tmp_path: Path
) -> None:
    write_minutely_rules(factories[0], tmp_path / "rules", 100)
    clock = FakeClock()
    beats = [shuffled_beat(factories[n + 1], f"beat-{n}", clock, seed=n) for n in range(3)]
    run_beats(beats, clock, ticks=16, step=20)  # 10:00:05 .. 10:05:05

    with factories[0]() as session:
        runs = session.execute(select(RunRow.rule_id, RunRow.trigger)).all()
        duplicates = session.scalar(select(func.sum(ScheduleOccurrenceRow.duplicate_claims)))
    assert len(runs) == 500 and len({(r, t["slot"]) for r, t in runs}) == 500
    assert duplicates == 1000  # all three claimed every slot at the same moment; one won each


def test_beats_started_again_resume_after_their_newest_claimed_slots(
    factories: list[SessionFactory], tmp_path: Path
) -> None:
    # Given 100 minutely rules fired by two beats for three minutes, then both stopped
    write_minutely_rules(factories[0], tmp_path / "rules", 100)
    clock = FakeClock()  # 10:00:05
    first = [
        Scheduler(factories[n + 1], InMemorySender(), f"beat-{n}", clock=clock) for n in (0, 1)
    ]
    run_beats(first, clock, ticks=10, step=20)  # fires 10:01 .. 10:03

    # When two new beats start 2 minutes later (10:05:25): they read where each trigger
    # stopped from the occurrences (in one statement per batch of triggers on PostgreSQL)
    clock.advance(100)
    again = [
        Scheduler(factories[n + 1], InMemorySender(), f"again-{n}", clock=clock) for n in (0, 1)
    ]
    run_beats(again, clock, ticks=1, step=20)

    # Then 10:04 (more than a minute late) is recorded missed and 10:05 fired, once per rule
    with factories[0]() as session:
        outcomes = session.execute(
            select(ScheduleOccurrenceRow.slot, ScheduleOccurrenceRow.outcome, func.count())
            .group_by(ScheduleOccurrenceRow.slot, ScheduleOccurrenceRow.outcome)
            .order_by(ScheduleOccurrenceRow.slot)
        ).all()
        runs = session.scalar(select(func.count()).select_from(RunRow))
    assert [(f"{slot:%H:%M}", outcome, n) for slot, outcome, n in outcomes] == [
        ("10:01", "fired", 100),
        ("10:02", "fired", 100),
        ("10:03", "fired", 100),
        ("10:04", "missed", 100),
        ("10:05", "fired", 100),
    ]
    assert runs == 400
