"""Schedule math: the UTC minute slots at which a `schedule` trigger fires.

Cron expressions are evaluated in the trigger's IANA time zone; a slot is identified by its UTC
minute, so the same occurrence has the same key on every beat.

Daylight-saving changes, defined here and tested for Europe/Berlin and America/New_York:

* **Skipped hour** (spring forward, e.g. 02:00-03:00 does not exist): a schedule whose times fall in
  the gap fires **once, at the first minute after the gap** (03:00 local), as Vixie cron does.
  Several gap times of one schedule (`*/20` at 02:00, 02:20, 02:40) collapse into that one fire, and
  it coincides with a regular 03:00 slot if the schedule has one.
* **Repeated hour** (fall back, e.g. 02:00-03:00 happens twice): a schedule whose hour field is
  `*` (it runs every hour) fires in **both** passes, because they are different instants; any
  other schedule fires **only in the first pass**, so a daily 02:30 job runs once that night.

A cron that never fires within `CRON_HORIZON_YEARS` (5) years (`0 0 30 2 *`: February 30) is
refused when a rule is admitted; one stored before that check existed (or whose time zone this
machine no longer knows) raises `ScheduleError` here, which callers treat as that trigger's
problem, never as a failure of the schedules around it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from ade_tasks.errors import AdeError, InvalidInputError
from ade_tasks.rules.base import CRON_ALIASES, parse_duration

CRON_HORIZON_YEARS = 5
#: How late a slot (or a one-shot run) may fire and still count as on time.
LATE_TOLERANCE = timedelta(minutes=1)

_ALIAS_EXPANSION = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
assert set(_ALIAS_EXPANSION) == CRON_ALIASES


@dataclass(frozen=True)
class ScheduleSpec:
    """One `schedule` trigger of one rule, as the scheduler needs it."""

    rule_id: str
    trigger_index: int
    cron: str
    timezone: str = "UTC"
    catchup_window: timedelta | None = None

    @property
    def expression(self) -> str:
        """The 5-field expression (aliases expanded)."""
        return _ALIAS_EXPANSION.get(self.cron, self.cron)

    @property
    def every_hour(self) -> bool:
        """Does the schedule run in every hour (its hour field is `*`)?"""
        return self.expression.split()[1] == "*"


class ScheduleError(AdeError):
    """A schedule trigger cannot be evaluated: its cron never fires, or its zone is unknown."""


def minute(moment: datetime) -> datetime:
    """The UTC minute a moment falls in; naive datetimes are refused."""
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r}; pass a timezone-aware datetime")
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


class CronSeries:
    """The fire slots of one cron expression in one time zone, shared by every trigger that has
    them, so 100,000 triggers of a few crons cost a few croniter walks, not 100,000.

    `next_after` is memoized (a slot -> the slot after it), and the walk continues the same
    croniter iterator while it is asked for the slot it last returned, as one cursor's walk
    did before the series were shared; a slot asked out of order starts a fresh iterator there.
    """

    def __init__(self, spec: ScheduleSpec) -> None:
        self.cron = spec.cron
        self.timezone = timezone = spec.timezone
        self._expression = spec.expression
        self._every_hour = spec.every_hour
        try:
            self._zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ScheduleError(
                f"unknown time zone {timezone!r} (this machine's tz database has no such "
                "zone); use an IANA name such as Europe/Berlin or UTC"
            ) from None
        self._iter: croniter | None = None
        self._at: datetime | None = None  # the slot the iterator last returned
        self._next: dict[datetime, datetime] = {}

    def next_after(self, start: datetime) -> datetime:
        """The first fire slot after the UTC minute `start`."""
        found = self._next.get(start)
        if found is None:
            if len(self._next) >= _SERIES_MEMO:
                self._next.clear()
            found = self._next[start] = self._walk(start)
        return found

    def _walk(self, start: datetime) -> datetime:
        if self._iter is None or self._at != start:
            try:
                self._iter = croniter(
                    self._expression,
                    start.astimezone(self._zone),
                    max_years_between_matches=CRON_HORIZON_YEARS,
                )
            except CroniterError as exc:
                raise ScheduleError(
                    f"cron {self.cron!r} is not a valid cron expression ({exc})"
                ) from None
        while True:
            try:
                local: datetime = self._iter.get_next(datetime)
            except CroniterError:  # CroniterBadDateError: no match within the horizon
                self._iter = None
                raise ScheduleError(
                    f"cron {self.cron!r} ({self.timezone}) never fires within "
                    f"{CRON_HORIZON_YEARS} years; check its day of month and month (e.g. "
                    "February has no 30th, April no 31st)"
                ) from None
            slot = minute(local)
            # The second pass of a repeated hour: fire it only for every-hour schedules.
            if slot.astimezone(self._zone).fold == 1 and not self._every_hour:
                continue
            self._at = slot
            return slot


_SERIES_MEMO = 4096  # slots remembered per series (a minutely cron: almost three days)
_SERIES_MAX = 10_000  # series kept (distinct cron and zone pairs); past it, rebuilt on demand
_SERIES: dict[tuple[str, str, str], CronSeries] = {}


def series_of(spec: ScheduleSpec) -> CronSeries:
    """The shared series of a schedule's cron and zone (built on first use)."""
    key = (spec.expression, spec.cron, spec.timezone)
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


def check_fires(cron: str, timezone: str = "UTC", now: datetime | None = None) -> None:
    """Raise ScheduleError unless the cron fires within `CRON_HORIZON_YEARS` after `now`."""
    now = now or datetime.now(UTC)
    first = CronCursor(ScheduleSpec("", 0, cron, timezone), now).peek()
    if first - now > timedelta(days=366 * CRON_HORIZON_YEARS):
        raise ScheduleError(
            f"cron {cron!r} ({timezone}) never fires within {CRON_HORIZON_YEARS} years "
            f"(next: {first:%Y-%m-%d})"
        )


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
