"""A schedule's slots never depend on where a walk starts: for any two start instants, the slots
in their common window are identical, through DST changes of whole hours and of 30 minutes
(issue 35, finding 4: two beats started at different times claimed different slots)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ade_tasks.cron.evaluator import Evaluator
from ade_tasks.cron.grammar import parse_cron
from ade_tasks.cron.legacy import admitted_day_match
from ade_tasks.cron.slots import ScheduleSpec, iter_slots

ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Australia/Adelaide")
#: Local midnights before DST changes of 2026-2027 in those zones (UTC instants).
CHANGES = [
    datetime(2026, 3, 28, 12, tzinfo=UTC),
    datetime(2026, 4, 4, 12, tzinfo=UTC),
    datetime(2026, 10, 3, 12, tzinfo=UTC),
    datetime(2026, 10, 24, 12, tzinfo=UTC),
    datetime(2026, 11, 1, 0, tzinfo=UTC),
    datetime(2027, 3, 13, 12, tzinfo=UTC),
    datetime(2027, 4, 3, 12, tzinfo=UTC),
]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize("cron", ["*/7 * * * *", "0-59/20 * * * *"])
def test_beats_started_at_different_times_agree_through_a_30_minute_shift(cron: str) -> None:
    # Given Lord Howe Island, whose clocks go back from 02:00 to 01:30 on 2026-04-05
    spec = ScheduleSpec("r", 0, cron, "Australia/Lord_Howe")
    end = utc("2026-04-04T16:00")
    # When one beat walks from before the repeated half hour and others from inside it
    early = list(iter_slots(spec, utc("2026-04-04T13:00"), end))
    for start in ("2026-04-04T14:31", "2026-04-04T14:59", "2026-04-04T15:00", "2026-04-04T15:13"):
        late = list(iter_slots(spec, utc(start), end))
        # Then their slots in the common window are the same
        assert late == [s for s in early if s > utc(start)], start


def minute_items(low: int, high: int) -> st.SearchStrategy[str]:
    single = st.integers(low, high).map(str)
    ranges = st.tuples(st.integers(low, high), st.integers(low, high)).map(
        lambda ab: f"{min(ab)}-{max(ab)}"
    )
    stepped = st.tuples(st.one_of(st.just("*"), ranges), st.integers(1, min(9, high))).map(
        lambda rs: f"{rs[0]}/{rs[1]}"
    )
    item = st.one_of(single, ranges, stepped)
    return st.one_of(st.just("*"), st.lists(item, min_size=1, max_size=3).map(",".join))


EXPRESSIONS = st.tuples(
    minute_items(0, 59),
    minute_items(0, 23),
    st.one_of(st.just("*"), minute_items(1, 28)),
    st.just("*"),
    st.one_of(st.just("*"), minute_items(0, 6)),
).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(
    cron=EXPRESSIONS,
    zone=st.sampled_from(ZONES),
    change=st.sampled_from(CHANGES),
    offsets=st.tuples(st.integers(0, 36 * 60), st.integers(0, 36 * 60)),
    day_match=st.sampled_from((None, "any", "all")),
    dst_gap=st.sampled_from((None, "skip", "shift")),
    dst_repeat=st.sampled_from((None, "first", "last", "both")),
)
def test_slots_in_a_common_window_do_not_depend_on_the_start(
    cron: str,
    zone: str,
    change: datetime,
    offsets: tuple[int, int],
    day_match: str | None,
    dst_gap: str | None,
    dst_repeat: str | None,
) -> None:
    evaluator = Evaluator(parse_cron(cron), zone, day_match, dst_gap, dst_repeat)
    first, second = sorted(change + timedelta(minutes=m) for m in offsets)
    end = second + timedelta(hours=6)

    def walk(start: datetime) -> list[datetime]:
        slots, moment = [], start
        while (moment := evaluator.next_after(moment)) <= end:
            slots.append(moment)
        return slots

    assert walk(second) == [s for s in walk(first) if s > second]


@settings(max_examples=60, deadline=None)
@given(
    cron=EXPRESSIONS,
    zone=st.sampled_from(ZONES),
    change=st.sampled_from(CHANGES),
    offsets=st.tuples(st.integers(0, 36 * 60), st.integers(0, 36 * 60)),
)
def test_beats_sharing_a_walk_agree_whichever_started_first(
    cron: str, zone: str, change: datetime, offsets: tuple[int, int]
) -> None:
    # Cursors of two beats (or of one beat's two triggers) share one memoized series.
    expr = parse_cron(cron)
    spec = ScheduleSpec("r", 0, expr.canonical, zone, None, admitted_day_match(expr, None))
    first, second = sorted(change + timedelta(minutes=m) for m in offsets)
    end = second + timedelta(hours=6)
    late = list(iter_slots(spec, second, end))  # the later start walks first this time
    early = list(iter_slots(spec, first, end))
    assert late == [s for s in early if s > second]
