"""A time zone as spans of constant UTC offset: where its wall clock jumps forward (a gap of local
times that do not exist) or back (local times that happen twice).

zoneinfo answers "what offset at this instant" but does not list its transitions, so they are
found once per zone and year by sampling the offset every few hours and bisecting to the minute
where it changes (a zone changes its offset at most a few times a year, never twice in 6 hours).
"""

from __future__ import annotations

import functools
import threading
from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

MINUTE = timedelta(minutes=1)
_SAMPLE = timedelta(hours=6)


@dataclass(frozen=True)
class Span:
    """UTC minutes [start, end) at one offset, and the jumps of the wall clock at either end."""

    start: datetime
    end: datetime
    offset: timedelta
    gap_before: timedelta  # wall-clock time the jump into this span skipped (0: none)
    repeated_before: timedelta  # how long its first wall times had happened before `start`
    repeated_after: timedelta  # how long its last wall times happen again after `end`

    @property
    def before(self) -> timedelta:
        """The offset just before `start`."""
        return self.offset - self.gap_before + self.repeated_before


@functools.lru_cache(maxsize=1024)
def spans_of(name: str) -> ZoneSpans:
    """The shared spans of a zone (its changes are found once per process)."""
    return ZoneSpans(ZoneInfo(name))


class ZoneSpans:
    """The offset spans of one zone, found a year at a time on first use."""

    def __init__(self, zone: ZoneInfo) -> None:
        self._zone = zone
        self._years: set[int] = set()
        self._changes: list[datetime] = []  # UTC instants where the offset changes, sorted
        self._offsets: list[timedelta] = []  # the offset from each change on
        self._lock = threading.Lock()  # the API's threads share a zone's spans

    def offset_at(self, moment: datetime) -> timedelta:
        """The zone's UTC offset at a UTC instant."""
        offset = moment.astimezone(self._zone).utcoffset()
        assert offset is not None
        return offset

    def span_at(self, moment: datetime) -> Span:
        """The span holding a UTC minute. A span ends at a change or, when none is near, at a
        year's end with the same offset on both sides (the walk just carries on there)."""
        with self._lock:
            return self._span_at(moment)

    def _span_at(self, moment: datetime) -> Span:
        year = moment.year
        for known in (year - 1, year, year + 1):
            self._learn(known)
        floor, ceiling = datetime(year - 1, 1, 1, tzinfo=UTC), datetime(year + 2, 1, 1, tzinfo=UTC)
        index = bisect_right(self._changes, moment)
        offset = self.offset_at(moment)
        start, before = floor, offset
        if index and self._changes[index - 1] >= floor:
            start = self._changes[index - 1]
            before = self.offset_at(start - MINUTE)
        end, after = ceiling, offset
        if index < len(self._changes) and self._changes[index] <= ceiling:
            end, after = self._changes[index], self._offsets[index]
        zero = timedelta(0)
        return Span(
            start,
            end,
            offset,
            max(offset - before, zero),
            max(before - offset, zero),
            max(offset - after, zero),
        )

    def _learn(self, year: int) -> None:
        if year in self._years:
            return
        self._years.add(year)
        moment = datetime(year, 1, 1, tzinfo=UTC)
        end = datetime(year + 1, 1, 1, tzinfo=UTC)
        offset = self.offset_at(moment)
        found = []
        while moment < end:
            following = moment + _SAMPLE
            nxt = self.offset_at(following)
            if nxt != offset:
                found.append(self._change_between(moment, following, nxt))
            moment, offset = following, nxt
        for change in found:
            index = bisect_right(self._changes, change)
            self._changes.insert(index, change)
            self._offsets.insert(index, self.offset_at(change))

    def _change_between(self, low: datetime, high: datetime, new: timedelta) -> datetime:
        """The first minute in (low, high] with the offset `new` (bisection)."""
        while high - low > MINUTE:
            middle = low + (high - low) // 2
            middle = middle.replace(second=0, microsecond=0)
            if middle <= low:
                middle = low + MINUTE
            if self.offset_at(middle) == new:
                high = middle
            else:
                low = middle
        return high
