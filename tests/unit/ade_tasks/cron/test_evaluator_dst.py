"""Daylight saving as a per-trigger policy (docs/triggers.md, "Daylight saving"): a local time
that does not exist is skipped or shifted to the first minute after the gap, one that happens
twice fires in the first pass, the last or both; the defaults are Debian cron's. The examples
are the table of the docs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ade_tasks.cron.evaluator import Evaluator
from ade_tasks.cron.grammar import parse_cron


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(
    cron: str, zone: str, after: str, until: str, gap: str | None = None, repeat: str | None = None
) -> list[str]:
    """Each fire in (after, until] as `UTC (local)`."""
    evaluator = Evaluator(parse_cron(cron), zone, None, gap, repeat)
    found, moment = [], utc(after)
    while (moment := evaluator.next_after(moment)) <= utc(until):
        found.append(f"{moment:%H:%M}Z ({moment.astimezone(evaluator.zone):%H:%M})")
    return found


BERLIN_SPRING = ("Europe/Berlin", "2026-03-28T23:00", "2026-03-29T02:00")  # 02:00 -> 03:00
BERLIN_FALL = ("Europe/Berlin", "2026-10-24T23:00", "2026-10-25T02:00")  # 03:00 -> 02:00
HOWE_FALL = ("Australia/Lord_Howe", "2026-04-04T14:00", "2026-04-04T16:00")  # 02:00 -> 01:30
HOWE_SPRING = ("Australia/Lord_Howe", "2026-10-03T15:00", "2026-10-03T16:00")  # 02:00 -> 02:30


@pytest.mark.parametrize(
    ("cron", "night", "gap", "repeat", "expected"),
    [
        # A fixed time (minute and hour without `*`): shift and first, as Debian's cron.
        ("30 2 * * *", BERLIN_SPRING, None, None, ["01:00Z (03:00)"]),
        ("30 2 * * *", BERLIN_SPRING, "skip", None, []),
        ("30 2 * * *", BERLIN_FALL, None, None, ["00:30Z (02:30)"]),
        ("30 2 * * *", BERLIN_FALL, None, "last", ["01:30Z (02:30)"]),
        ("30 2 * * *", BERLIN_FALL, None, "both", ["00:30Z (02:30)", "01:30Z (02:30)"]),
        ("0,30 2 * * *", BERLIN_SPRING, "shift", None, ["01:00Z (03:00)"]),  # one fire for two
        # A wildcard (minute or hour starts with `*`): runs by the new clock, skip and both.
        ("15 * * * *", BERLIN_SPRING, None, None, ["23:15Z (00:15)", "00:15Z (01:15)", "01:15Z (03:15)"]),
        ("15 * * * *", BERLIN_SPRING, "shift", None, ["23:15Z (00:15)", "00:15Z (01:15)", "01:00Z (03:00)", "01:15Z (03:15)"]),
        ("15 * * * *", BERLIN_FALL, None, None, ["23:15Z (01:15)", "00:15Z (02:15)", "01:15Z (02:15)"]),
        ("15 * * * *", BERLIN_FALL, None, "first", ["23:15Z (01:15)", "00:15Z (02:15)"]),
        # A 30-minute shift.
        ("45 1 * * *", HOWE_FALL, None, None, ["14:45Z (01:45)"]),
        ("45 1 * * *", HOWE_FALL, None, "last", ["15:15Z (01:45)"]),
        ("*/20 * * * *", HOWE_FALL, None, None, ["14:20Z (01:20)", "14:40Z (01:40)", "15:10Z (01:40)", "15:30Z (02:00)", "15:50Z (02:20)"]),
        ("15 2 * * *", HOWE_SPRING, None, None, ["15:30Z (02:30)"]),
        ("15 2 * * *", HOWE_SPRING, "skip", None, []),
    ],
)  # fmt: skip
def test_dst_policies(
    cron: str, night: tuple[str, str, str], gap: str | None, repeat: str | None, expected: list[str]
) -> None:
    zone, after, until = night
    assert fires(cron, zone, after, until, gap, repeat) == expected


def test_a_30_minute_zone_keeps_both_passes_of_a_wildcard_schedule() -> None:
    # */7 in the repeated half hour 01:30-01:59: 01:35, 01:42, 01:49, 01:56 happen twice.
    passes = fires("*/7 * * * *", "Australia/Lord_Howe", "2026-04-04T14:30", "2026-04-04T15:30")
    assert passes == [
        "14:35Z (01:35)", "14:42Z (01:42)", "14:49Z (01:49)", "14:56Z (01:56)",
        "15:05Z (01:35)", "15:12Z (01:42)", "15:19Z (01:49)", "15:26Z (01:56)", "15:30Z (02:00)",
    ]  # fmt: skip


def test_each_moved_or_doubled_fire_says_so_and_others_do_not() -> None:
    shifted = Evaluator(parse_cron("30 2 * * *"), "Europe/Berlin")
    assert shifted.dst_note(utc("2026-03-29T01:00")) == (
        "moved: 02:30 does not exist that day (clocks jump to 03:00); dst_gap: shift"
    )
    assert shifted.dst_note(utc("2026-10-25T00:30")) == (
        "02:30 happens twice (clocks go back); fires once, in the first pass"
    )
    assert shifted.dst_note(utc("2026-03-30T00:30")) is None
    doubled = Evaluator(parse_cron("15 * * * *"), "Europe/Berlin")
    assert doubled.dst_note(utc("2026-10-25T01:15")) == (
        "doubled: 02:15 happens twice (clocks go back); second of 2 fires"
    )
    assert doubled.dst_note(utc("2026-03-29T01:15")) is None  # 03:15, after the gap
