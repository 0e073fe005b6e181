"""A beat's schedule book loads rules incrementally by content hash, and cron series are shared."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from ade_tasks.cron import slots
from ade_tasks.cron.slots import CronCursor, ScheduleSpec, iter_slots
from ade_tasks.db.engine import SessionFactory
from ade_tasks.schedule.specs import ScheduleBook
from tests.unit.conftest import schedule_rule


def test_a_load_returns_only_the_rules_that_changed_since_the_last(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    # Given three rules loaded once
    for rule_id in ("a", "b", "c"):
        schedule_rule(session_factory, rules_dir, rule_id, "*/5 * * * *")
    book = ScheduleBook(session_factory)
    assert book.load() == {"a", "b", "c"}
    assert sorted(book.specs) == [(r, 0, "*/5 * * * *") for r in ("a", "b", "c")]

    # When nothing changed, then nothing is reported
    assert book.load() == set()

    # When one is edited and one disabled, then only those two are, with their new triggers
    schedule_rule(session_factory, rules_dir, "a", "0 * * * *")
    schedule_rule(session_factory, rules_dir, "b", "*/5 * * * *", enabled=False)
    assert book.load() == {"a", "b"}
    assert sorted(book.specs) == [("a", 0, "0 * * * *"), ("c", 0, "*/5 * * * *")]
    assert book.keys_of("a") == [("a", 0, "0 * * * *")] and book.keys_of("b") == []


def test_forgotten_rules_are_loaded_again(session_factory: SessionFactory, rules_dir: Path) -> None:
    # Given a loaded rule whose refresh failed after the load (the scheduler forgets it)
    schedule_rule(session_factory, rules_dir, "a", "*/5 * * * *")
    book = ScheduleBook(session_factory)
    book.load()
    book.forget({"a"})
    assert book.specs == {}

    # When the book loads again, then the rule is back, though the table did not change
    assert book.load() == {"a"}
    assert list(book.specs) == [("a", 0, "*/5 * * * *")]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_cursors_sharing_a_series_each_walk_their_own_slots_across_a_dst_change() -> None:
    # Given two triggers of one cron and zone at different places, walked in turns across the
    # night Berlin springs forward (the series, its memo and its iterator are shared)
    slots._SERIES.clear()
    spec = ScheduleSpec("r", 0, "*/20 * * * *", "Europe/Berlin")
    early = CronCursor(spec, utc("2026-03-28T23:00"))
    late = CronCursor(ScheduleSpec("s", 0, spec.cron, spec.timezone), utc("2026-03-29T00:50"))
    walked: dict[str, list[datetime]] = {"early": [], "late": []}
    moment = utc("2026-03-29T00:00")
    for _ in range(12):
        walked["late"] += late.due(moment)
        walked["early"] += early.due(moment)
        moment += timedelta(minutes=17)

    # Then each walked exactly the slots a cursor of its own would have
    slots._SERIES.clear()
    end = moment - timedelta(minutes=17)
    assert walked["early"] == list(iter_slots(spec, utc("2026-03-28T23:00"), end))
    assert walked["late"] == list(iter_slots(spec, utc("2026-03-29T00:50"), end))
    assert utc("2026-03-29T01:00") in walked["late"]  # 03:00 CEST, right after the gap
