"""The one schedule evaluator: the UTC minutes at which a cron expression fires in a time zone,
under the trigger's day rule and daylight-saving policy.

The slots are a set defined minute by minute, so where a walk starts never changes them: a UTC
minute is a slot when its wall-clock time matches the expression and, if that wall time happens
twice, the pass is one the `dst_repeat` policy keeps (`first`, `last` or `both`); and, under
`dst_gap: shift`, the first minute after a jump forward is a slot when a skipped wall-clock time
matches (several skipped times are one fire). `next_after` finds the smallest slot after an
instant, span of constant offset by span, so it never depends on an earlier walk.

Defaults, as Debian's cron: an expression whose minute or hour field starts with `*` (a
"wildcard" schedule, `@hourly` too) runs by the new wall clock (`skip` skipped times, `both`
passes of repeated ones); any other runs a skipped time right after the jump (`shift`) and a
repeated time once (`first`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ade_tasks.cron.grammar import CronExpr, WallClock
from ade_tasks.cron.zones import MINUTE, Span, spans_of
from ade_tasks.errors import AdeError

DST_GAPS = ("skip", "shift")
DST_REPEATS = ("first", "last", "both")
#: Past this, a walk gives up: within 400 years every date falls on every weekday.
HORIZON = timedelta(days=366 * 401)


class ScheduleError(AdeError):
    """A schedule trigger cannot be evaluated: its cron never fires, or its zone is unknown."""


def zone_named(name: str) -> ZoneInfo:
    """The IANA zone of this name; ScheduleError if this machine does not know it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r} (this machine's tz database has no such zone); use "
            "an IANA name such as Europe/Berlin or UTC"
        ) from None


def never_fires(expr: CronExpr, where: str = "") -> str:
    """Why an expression that matches no calendar day is refused."""
    return (
        f"cron {expr.text!r}{where} never fires: no month of its month field has a day of its "
        "day-of-month field (February has no 30th, April no 31st); fix the day or the month"
    )


def default_policy(expr: CronExpr) -> tuple[str, str]:
    """The (dst_gap, dst_repeat) Debian's cron applies to this expression."""
    return ("skip", "both") if expr.wildcard_time else ("shift", "first")


class Evaluator:
    """The slots of one expression in one zone under one day rule and DST policy."""

    def __init__(
        self,
        expr: CronExpr,
        timezone: str = "UTC",
        day_match: str | None = None,
        dst_gap: str | None = None,
        dst_repeat: str | None = None,
    ) -> None:
        self.expr = expr
        self.timezone = timezone
        self.zone = zone_named(timezone)
        self.day_match = day_match or expr.default_day_match()
        gap, repeat = default_policy(expr)
        self.dst_gap = dst_gap or gap
        self.dst_repeat = dst_repeat or repeat
        if not expr.can_fire(self.day_match):
            raise ScheduleError(never_fires(expr, f" ({timezone})"))
        self._wall = WallClock(expr, self.day_match)
        self._spans = spans_of(timezone)
        # The span the last walk was in, with its end as a wall time (the bound of a walk in
        # it); one attribute, so threads sharing this evaluator never see half of an update.
        self._span = self._spanned(datetime(2000, 1, 1, tzinfo=UTC))

    def next_after(self, after: datetime) -> datetime:
        """The first slot after the UTC minute `after`."""
        moment = after + MINUTE
        limit = after + HORIZON
        while moment < limit:
            span, span_end = self._span
            if not span.start <= moment < span.end:
                span, span_end = self._span = self._spanned(moment)
            offset = span.offset
            if moment == span.start and span.gap_before and self.dst_gap == "shift":
                if self._wall.next_match(_wall(moment, span.before), _wall(moment, offset)):
                    return moment
            found = self._wall.next_match(_wall(moment, offset), span_end)
            if found is None:
                moment = span.end
                continue
            slot = found.replace(tzinfo=UTC) - offset
            first_pass = span.end - span.repeated_after
            if self.dst_repeat == "last" and span.repeated_after and slot >= first_pass:
                moment = span.end  # every wall time from here to the change comes again
                continue
            second_pass = span.start + span.repeated_before
            if self.dst_repeat == "first" and span.repeated_before and slot < second_pass:
                moment = second_pass
                continue
            return slot
        raise ScheduleError(
            f"cron {self.expr.text!r} ({self.timezone}) does not fire within 400 years of "
            f"{after:%Y-%m-%d}"
        )

    def _spanned(self, moment: datetime) -> tuple[Span, datetime]:
        span = self._spans.span_at(moment)
        return span, _wall(span.end, span.offset)

    def dst_note(self, slot: datetime) -> str | None:
        """How a daylight-saving change moved or doubled this slot (None: it did not)."""
        span = self._spans.span_at(slot)
        wall = _wall(slot, span.offset)
        if slot == span.start and span.gap_before and not self._wall.matches(wall):
            skipped = self._wall.next_match(_wall(slot, span.before), wall)
            if skipped is not None:
                return (
                    f"moved: {skipped:%H:%M} does not exist that day (clocks jump to "
                    f"{wall:%H:%M}); dst_gap: shift"
                )
        which = _pass(span, slot)
        if which is None:
            return None
        if self.dst_repeat == "both":
            return f"doubled: {wall:%H:%M} happens twice (clocks go back); {which} of 2 fires"
        return f"{wall:%H:%M} happens twice (clocks go back); fires once, in the {which} pass"


def _wall(moment: datetime, offset: timedelta) -> datetime:
    """A UTC instant's naive wall-clock time at an offset."""
    return (moment + offset).replace(tzinfo=None)


def _pass(span: Span, slot: datetime) -> str | None:
    if span.repeated_after and slot >= span.end - span.repeated_after:
        return "first"
    if span.repeated_before and slot < span.start + span.repeated_before:
        return "second"
    return None
