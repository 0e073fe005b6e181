"""The due queue: a tick takes out only the cursors whose slot came, and skips dropped ones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ade_tasks.cron.slots import CronCursor, ScheduleSpec
from ade_tasks.schedule.due_queue import DueQueue

NOW = datetime(2026, 12, 3, 10, 0, 30, tzinfo=UTC)


def cursor(cron: str, rule_id: str = "r") -> CronCursor:
    return CronCursor(ScheduleSpec(rule_id, 0, cron), NOW)


def test_only_the_cursors_of_the_slots_that_came_are_taken_out() -> None:
    minutely, hourly = cursor("* * * * *"), cursor("0 * * * *")
    current = {"minutely": minutely, "hourly": hourly}
    queue: DueQueue[str] = DueQueue()
    for key, filed in current.items():
        queue.file(key, filed)

    assert queue.pop_due(NOW, current) == []
    assert queue.next_slot() == datetime(2026, 12, 3, 10, 1, tzinfo=UTC)
    assert queue.pop_due(NOW + timedelta(seconds=30), current) == [("minutely", minutely)]
    assert queue.next_slot() == datetime(2026, 12, 3, 11, 0, tzinfo=UTC)
    assert len(queue) == 1  # the minutely one is out until it is filed again


def test_a_dropped_or_replaced_cursor_is_skipped_and_compacted_away() -> None:
    old, new = cursor("* * * * *"), cursor("*/2 * * * *")
    queue: DueQueue[str] = DueQueue()
    queue.file("edited", old)
    queue.file("edited", new)  # the rule was edited: its old cursor stays filed
    queue.file("removed", cursor("* * * * *", "removed"))
    current = {"edited": new}

    assert len(queue) == 3
    queue.compact(current)
    assert len(queue) == 1
    due = queue.pop_due(NOW + timedelta(minutes=5), current)
    assert due == [("edited", new)]


def test_a_popped_entry_whose_cursor_was_replaced_is_not_returned() -> None:
    old, new = cursor("* * * * *"), cursor("*/2 * * * *")
    queue: DueQueue[str] = DueQueue()
    queue.file("edited", old)
    assert queue.pop_due(NOW + timedelta(minutes=1), {"edited": new}) == []
    assert len(queue) == 0 and queue.next_slot() is None
