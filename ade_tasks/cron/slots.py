"""Schedule slots: the UTC minutes at which a `schedule` trigger fires, walked by cursors that the
beats keep between ticks.

A slot is identified by its UTC minute, so the same occurrence has the same key on every beat.
What the expression means (grammar, day rule, daylight-saving policy) is `grammar` and `evaluator`;
this module shares one evaluator walk among every trigger of the same cron, zone and policy.

A stored trigger that this version cannot evaluate (a cron outside the grammar or whose meaning
changed since it was stored, `legacy`; a cron that never fires; a time zone this machine does
not know) raises `ScheduleError` here, which callers treat as that trigger's problem, never as a
failure of the schedules around it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ade_tasks.cron.evaluator import Evaluator, ScheduleError
from ade_tasks.cron.grammar import CronSyntaxError, parse_cron
from ade_tasks.cron.legacy import meaning_change
from ade_tasks.durations import parse_duration
from ade_tasks.errors import InvalidInputError

__all__ = ["LATE_TOLERANCE", "CronCursor", "ScheduleError", "ScheduleSpec"]

#: How late a slot (or a one-shot run) may fire and still count as on time.
LATE_TOLERANCE = timedelta(minutes=1)


@dataclass(frozen=True)
class ScheduleSpec:
    """One `schedule` trigger of one rule, as the scheduler needs it."""

    rule_id: str
    trigger_index: int
    cron: str
    timezone: str = "UTC"
    catchup_window: timedelta | None = None
    day_match: str | None = None
    dst_gap: str | None = None
    dst_repeat: str | None = None


def stored_evaluator(spec: ScheduleSpec) -> Evaluator:
    """The evaluator of a stored trigger; ScheduleError says why it has none."""
    try:
        expr = parse_cron(spec.cron)
    except CronSyntaxError as exc:
        raise ScheduleError(
            f"{exc.message} (stored by an earlier version that accepted it; it does not fire "
            "until the rule is fixed)"
        ) from None
    changed = meaning_change(expr, spec.day_match)
    if changed is not None:
        raise ScheduleError(changed)
    return Evaluator(expr, spec.timezone, spec.day_match, spec.dst_gap, spec.dst_repeat)


def minute(moment: datetime) -> datetime:
    """The UTC minute a moment falls in; naive datetimes are refused."""
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r}; pass a timezone-aware datetime")
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


class CronSeries:
    """The fire slots of one stored trigger's schedule, shared by every trigger that has the
    same, so 100,000 triggers of a few crons cost a few walks, not 100,000.

    `next_after` is memoized (a slot -> the slot after it); the evaluator's answer never
    depends on where a walk started, so a memo filled by one cursor serves every other."""

    def __init__(self, spec: ScheduleSpec) -> None:
        self.evaluator = stored_evaluator(spec)
        self._next: dict[datetime, datetime] = {}

    def next_after(self, start: datetime) -> datetime:
        """The first fire slot after the UTC minute `start`."""
        found = self._next.get(start)
        if found is None:
            if len(self._next) >= _SERIES_MEMO:
                self._next.clear()
            found = self._next[start] = self.evaluator.next_after(start)
        return found


_SERIES_MEMO = 4096  # slots remembered per series (a minutely cron: almost three days)
_SERIES_MAX = 10_000  # series kept (distinct crons, zones and policies); past it, rebuilt on demand
_SERIES: dict[tuple[Any, ...], CronSeries] = {}


def series_of(spec: ScheduleSpec) -> CronSeries:
    """The shared series of a schedule's cron, zone and policies (built on first use)."""
    key = (spec.cron, spec.timezone, spec.day_match, spec.dst_gap, spec.dst_repeat)
    series = _SERIES.get(key)
    if series is None:
        if len(_SERIES) >= _SERIES_MAX:
            _SERIES.clear()
        series = CronSeries(spec)
        _SERIES[key] = series  # only once it was built: a bad zone or cron raises every time
    return series


class CronCursor:
    """One trigger's place in its cron's series; kept between ticks, never rebuilt per tick."""

    def __init__(self, spec: ScheduleSpec, after: datetime) -> None:
        self.spec = spec
        self._series = series_of(spec)
        self._next = self._series.next_after(minute(after))

    def peek(self) -> datetime:
        """The next slot, without consuming it."""
        return self._next

    def due(self, until: datetime) -> list[datetime]:
        """Consume and return every slot at or before `until`."""
        # Slots are whole minutes, so a slot is at or before `until` exactly when it is at or
        # before `until`'s minute: no minute() math (it was most of a boundary's 100,000 calls).
        if self._next > until:
            return []
        slots = []
        while self._next <= until:
            slots.append(self._next)
            self._next = self._series.next_after(self._next)
        return slots


def next_fire_times(spec: ScheduleSpec, after: datetime, count: int) -> list[datetime]:
    """The next `count` UTC slots after `after` (for previews)."""
    cursor = CronCursor(spec, after)
    return [cursor.due(cursor.peek())[0] for _ in range(count)]


def iter_slots(spec: ScheduleSpec, after: datetime, until: datetime) -> Iterator[datetime]:
    """Every slot in (after, until]."""
    yield from CronCursor(spec, after).due(until)


# --- one-shot times (`ade_tasks.schedule.one_shots` fires them) -----------------------------------


def check_zoned(value: Any, field: str) -> Any:
    """Refuse a timestamp without `Z` or an offset (a string or a datetime); others pass."""
    text = value.isoformat() if isinstance(value, datetime) else value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("z", "Z"))
        except ValueError:
            raise ValueError(
                f"{field} {value!r} is not an ISO 8601 timestamp; write e.g. "
                "2026-12-24T18:00:00+01:00 or 2026-12-24T17:00:00Z"
            ) from None
        value = parsed
    if isinstance(value, datetime) and value.tzinfo is None:
        raise ValueError(
            f"{field} {text} has no time zone, so it would mean a different moment on every "
            f"machine; write it with Z or an offset, e.g. {text}Z or {text}+01:00"
        )
    return value


def grace(catchup_window: timedelta | None) -> timedelta:
    """How late a one-shot may fire: the catch-up window, at least `LATE_TOLERANCE`."""
    return max(LATE_TOLERANCE, catchup_window or timedelta(0))


def check_not_past(
    when: datetime,
    catchup_window: timedelta | None,
    field: str,
    now: datetime | None = None,
) -> None:
    """Refuse a time so far in the past that no beat would fire it any more."""
    late = (now or datetime.now(UTC)) - when
    if late > grace(catchup_window):
        window = f"its catchup_window ({span(catchup_window)})" if catchup_window else "1 min"
        raise ValueError(
            f"{field} {when.isoformat()} is {span(late)} in the past, beyond {window}, so it "
            "would never fire; give a time in the future (or a catchup_window that reaches it)"
        )


def parse_delay(text: str, field: str = "--in") -> timedelta:
    """`90`, `90s`, `10m`, `2h`, `1d` as a non-negative delay; InvalidInputError otherwise."""
    try:
        delay = parse_duration(text.strip())
    except ValueError as exc:
        raise InvalidInputError(f"{field}: {exc}") from None
    if delay < timedelta(0):
        raise InvalidInputError(f"{field}: a delay must be 0 or more, not {text!r}")
    return delay


def span(delta: timedelta) -> str:
    """A duration as people write it: `45s`, `3min 20s`, `2h 5min`, `1d 4h`."""
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400}d {seconds % 86400 // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h {seconds % 3600 // 60}min"
    if seconds >= 60:
        return f"{seconds // 60}min {seconds % 60}s"
    return f"{seconds}s"
