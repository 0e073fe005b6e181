"""Several beats against one PostgreSQL: every occurrence is fired exactly once."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from ade_tasks.db import occurrences as occ_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.retry import is_connection_lost
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.db.shard_tables import ScheduleShardRow
from ade_tasks.schedule.scheduler import Scheduler
from ade_tasks.testing import InMemorySender
from tests.scheduler_support import FakeClock, write_minutely_rules
from tests.support import wait_until


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


def outcomes_by_slot(sessions: SessionFactory) -> list[tuple[str, str, int]]:
    """(slot as HH:MM, outcome, how many occurrences), by slot."""
    with sessions() as session:
        rows = session.execute(
            select(ScheduleOccurrenceRow.slot, ScheduleOccurrenceRow.outcome, func.count())
            .group_by(ScheduleOccurrenceRow.slot, ScheduleOccurrenceRow.outcome)
            .order_by(ScheduleOccurrenceRow.slot)
        ).all()
    return [(f"{slot:%H:%M}", outcome, n) for slot, outcome, n in rows]


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
        losers = session.scalar(select(func.sum(ScheduleShardRow.losers)))
    assert len(runs) == 2000 and len(pairs) == 2000  # 200 rules x 10 slots, none twice
    assert dict(outcomes) == {"fired": 2000}
    # The two later beats claimed each minute's one shard too, lost, and claimed none of its
    # slots.
    assert (losers, duplicates) == (20, 0)


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
        losers = session.scalar(select(func.sum(ScheduleShardRow.losers)))
    assert len(runs) == 500 and len({(r, t["slot"]) for r, t in runs}) == 500
    # All three claimed each minute's shard at the same moment; one won each, and the two
    # others skipped its slots.
    assert (losers, duplicates) == (10, 0)


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
        runs = session.scalar(select(func.count()).select_from(RunRow))
    assert outcomes_by_slot(factories[0]) == [
        ("10:01", "fired", 100),
        ("10:02", "fired", 100),
        ("10:03", "fired", 100),
        ("10:04", "missed", 100),
        ("10:05", "fired", 100),
    ]
    assert runs == 400


def test_a_beat_frozen_in_its_claim_holds_the_others_up_for_seconds_not_until_it_wakes(
    factories: list[SessionFactory], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A beat stopped (SIGSTOP, a paused VM) between its claim's INSERT and COMMIT holds the
    slots' row locks. PostgreSQL ends that transaction after `FROZEN_AFTER`, so the other beat
    claims and fires the slots; the frozen beat, woken minutes later, finds them fired and
    records none of them missed."""
    # Given 20 minutely rules and two beats, one of which freezes inside its next claim
    write_minutely_rules(factories[0], tmp_path / "rules", 20)
    monkeypatch.setattr(occ_db, "FROZEN_AFTER", timedelta(seconds=1))
    clock = FakeClock()  # 10:00:05
    quick = timedelta(milliseconds=300)
    sleeper = Scheduler(factories[1], InMemorySender(), "sleeper", clock=clock, lock_timeout=quick)
    other = Scheduler(factories[2], InMemorySender(), "other", clock=clock, lock_timeout=quick)
    run_beats([sleeper, other], clock, ticks=1, step=60)  # both start at the next slot, 10:01
    frozen, wake = threading.Event(), threading.Event()
    claim = occ_db.claim

    def claim_then_freeze(session: Any, keys: Any, beat_id: str, *args: Any) -> Any:
        won = claim(session, keys, beat_id, *args)
        if beat_id == "sleeper":
            frozen.set()
            wake.wait(60)
        return won

    monkeypatch.setattr(occ_db, "claim", claim_then_freeze)
    failures: list[Exception] = []

    def sleeper_tick() -> None:
        try:
            sleeper.tick()
        except Exception as exc:  # looked at below
            failures.append(exc)

    thread = threading.Thread(target=sleeper_tick)
    thread.start()
    assert frozen.wait(10), "the sleeper to claim 10:01 and freeze"

    # When the other beat ticks on through three minutes while the sleeper stays frozen
    def other_fired(minute: str) -> bool:
        other.tick()
        return (minute, "fired", 20) in outcomes_by_slot(factories[0])

    try:
        for minute in ("10:01", "10:02", "10:03"):
            # Then it fires every slot within seconds, the frozen claim's first
            wait_until(partial(other_fired, minute), 15, f"the other beat to fire {minute}")
            clock.advance(60)
    finally:
        wake.set()
        thread.join(timeout=30)
    # The sleeper wakes at 10:04:05 to a claim PostgreSQL ended under it
    assert len(failures) == 1 and is_connection_lost(failures[0]), failures
    # And its next tick, three slots behind, fires nothing twice and records nothing missed
    run_beats([sleeper, other], clock, ticks=1, step=60)
    with factories[0]() as session:
        runs = session.execute(select(RunRow.rule_id, RunRow.trigger)).all()
    assert outcomes_by_slot(factories[0]) == [
        (minute, "fired", 20) for minute in ("10:01", "10:02", "10:03", "10:04")
    ]
    assert len(runs) == 80 and len({(r, t["slot"]) for r, t in runs}) == 80
