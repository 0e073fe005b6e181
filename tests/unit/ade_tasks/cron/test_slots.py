"""Schedule math, daylight-saving changes included (the semantics are in ade_tasks/cron/slots.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ade_tasks.cron.slots import CronCursor, ScheduleSpec, iter_slots, next_fire_times


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def hhmm(slots: list[datetime]) -> list[str]:
    return [s.strftime("%m-%d %H:%M") for s in slots]


def test_every_minute_slots_are_utc_minutes() -> None:
    spec = ScheduleSpec("r", 0, "* * * * *")
    slots = list(iter_slots(spec, utc("2026-11-30T10:00:30"), utc("2026-11-30T10:03:10")))
    assert hhmm(slots) == ["11-30 10:01", "11-30 10:02", "11-30 10:03"]


def test_sunday_as_zero_or_seven_and_aliases() -> None:
    after = utc("2026-11-28T00:00")  # a Saturday
    for cron in ("0 9 * * 0", "0 9 * * 7"):
        assert hhmm(next_fire_times(ScheduleSpec("r", 0, cron), after, 1)) == ["11-29 09:00"]
    assert hhmm(next_fire_times(ScheduleSpec("r", 0, "@hourly"), after, 2)) == [
        "11-28 01:00",
        "11-28 02:00",
    ]


@pytest.mark.parametrize(
    ("zone", "day", "utc_expected"),
    [
        # 02:30 does not exist on these nights; the run happens at 03:00 local, once.
        ("Europe/Berlin", "2026-03-29", ["03-28 01:30", "03-29 01:00", "03-30 00:30"]),
        ("America/New_York", "2026-03-08", ["03-07 07:30", "03-08 07:00", "03-09 06:30"]),
    ],
)
def test_skipped_hour_fires_once_right_after_the_gap(
    zone: str, day: str, utc_expected: list[str]
) -> None:
    spec = ScheduleSpec("r", 0, "30 2 * * *", zone)
    start = datetime.fromisoformat(day).replace(tzinfo=UTC) - timedelta(days=1)
    assert hhmm(next_fire_times(spec, start, 3)) == utc_expected


def test_skipped_hour_collapses_an_every_twenty_minutes_schedule() -> None:
    spec = ScheduleSpec("r", 0, "*/20 * * * *", "Europe/Berlin")
    # 00:40Z = 01:40 CET; the next local times 02:00..02:40 do not exist; 03:00 CEST = 01:00Z.
    slots = list(iter_slots(spec, utc("2026-03-29T00:40"), utc("2026-03-29T01:40")))
    assert hhmm(slots) == ["03-29 01:00", "03-29 01:20", "03-29 01:40"]


@pytest.mark.parametrize(
    ("zone", "cron", "after", "utc_expected"),
    [
        # 02:30 happens twice in Berlin on 2026-10-25 (00:30Z and 01:30Z): fire the first only.
        ("Europe/Berlin", "30 2 * * *", "2026-10-24T12:00", ["10-25 00:30", "10-26 01:30"]),
        # 01:30 happens twice in New York on 2026-11-01 (05:30Z and 06:30Z).
        ("America/New_York", "30 1 * * *", "2026-10-31T12:00", ["11-01 05:30", "11-02 06:30"]),
    ],
)
def test_repeated_hour_fires_a_fixed_time_schedule_once(
    zone: str, cron: str, after: str, utc_expected: list[str]
) -> None:
    assert hhmm(next_fire_times(ScheduleSpec("r", 0, cron, zone), utc(after), 2)) == utc_expected


def test_repeated_hour_fires_an_every_hour_schedule_in_both_passes() -> None:
    spec = ScheduleSpec("r", 0, "15 * * * *", "Europe/Berlin")
    slots = list(iter_slots(spec, utc("2026-10-24T23:30"), utc("2026-10-25T02:30")))
    # local 02:15 CEST (00:15Z), 02:15 CET (01:15Z), 03:15 CET (02:15Z)
    assert hhmm(slots) == ["10-25 00:15", "10-25 01:15", "10-25 02:15"]


def test_a_cursor_is_kept_between_ticks() -> None:
    cursor = CronCursor(ScheduleSpec("r", 0, "*/5 * * * *"), utc("2026-11-30T10:00"))
    assert hhmm(cursor.due(utc("2026-11-30T10:04:59"))) == []
    assert hhmm(cursor.due(utc("2026-11-30T10:10:00"))) == ["11-30 10:05", "11-30 10:10"]
    assert hhmm(cursor.due(utc("2026-11-30T10:12"))) == []
    assert cursor.peek() == utc("2026-11-30T10:15")


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        CronCursor(ScheduleSpec("r", 0, "* * * * *"), datetime(2026, 1, 1))
