"""A boundary split into shards: the same split in every beat, and a beat that lost a shard but
sees more rules than its winner still fires them once."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select

from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.occurrences import OccurrenceKey
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.db.shard_tables import ScheduleShardRow
from ade_tasks.schedule.scheduler import Scheduler
from ade_tasks.schedule.shards import split
from ade_tasks.testing import InMemorySender
from tests.scheduler_support import FakeClock, write_minutely_rules

SLOT = datetime(2026, 11, 30, 10, 1, tzinfo=UTC)


def keys(count: int, slot: datetime = SLOT) -> list[OccurrenceKey]:
    return [OccurrenceKey(f"rule-{n:05d}", 0, "* * * * *", slot) for n in range(count)]


def test_every_beat_splits_the_same_occurrences_into_the_same_shards() -> None:
    # Given 10,000 occurrences due in one slot, in two beats' different orders
    due = keys(10_000)
    shuffled = due[:]
    random.Random(7).shuffle(shuffled)

    # When each beat splits them
    mine, theirs = split(due), split(shuffled)

    # Then both have the same shards, each key in exactly one, about a claim batch each
    assert [(s.shards, s.shard, s.keys, s.digest) for s in mine] == [
        (s.shards, s.shard, s.keys, s.digest) for s in theirs
    ]
    assert {s.shards for s in mine} == {32}  # the power of two that keeps shards <= 500 on average
    assert sorted(k for s in mine for k in s.keys) == sorted(due)
    assert max(len(s.keys) for s in mine) < 500


def test_a_shard_with_other_triggers_has_another_digest_and_slots_go_oldest_first() -> None:
    due = keys(3)
    [one] = split(due)
    [fewer] = split(due[:2])
    later = split(keys(3, SLOT + timedelta(minutes=1)) + due)
    assert one.digest != fewer.digest
    assert [s.slot for s in later] == [SLOT, SLOT + timedelta(minutes=1)]
    assert later[0].digest == later[1].digest == one.digest  # the same triggers, another slot


def test_a_beat_that_lost_a_shard_fires_the_rules_its_winner_did_not_see_once(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    # Given two beats that loaded 3 minutely rules, and a fourth rule only one of them saw
    write_minutely_rules(session_factory, rules_dir, 3)
    clock = FakeClock()  # 10:00:05
    stale = Scheduler(
        session_factory, InMemorySender(), "stale", clock=clock, refresh_every=timedelta(hours=1)
    )
    fresh = Scheduler(session_factory, InMemorySender(), "fresh", clock=clock)
    stale.tick()
    fresh.tick()
    write_minutely_rules(session_factory, rules_dir, 4)
    clock.advance(5)
    fresh.tick()  # refreshes: every-minute-0003 starts at 10:01

    # When the beat that missed the new rule wins the 10:01 shard, and the other comes second
    clock.advance(60)  # 10:01:10
    won = stale.tick()
    lost = fresh.tick()

    # Then the second finds the shard claimed for other triggers, claims the slots itself and
    # wins only the new rule's; every rule runs once
    assert len(won.fired) == 3 and list(lost.fired) == [
        OccurrenceKey("every-minute-0003", 0, "* * * * *", SLOT)
    ]
    with session_factory() as session:
        runs = session.execute(select(RunRow.rule_id, func.count()).group_by(RunRow.rule_id))
        duplicates = session.scalar(select(func.sum(ScheduleOccurrenceRow.duplicate_claims)))
        losers = session.scalar(select(func.sum(ScheduleShardRow.losers)))
    assert dict(runs.all()) == {f"every-minute-{n:04d}": 1 for n in range(4)}
    assert (losers, duplicates) == (1, 3)
