"""The cron grammar this project accepts, and which wall-clock minutes an expression names.

Five fields, `minute hour day-of-month month day-of-week`, each a comma-separated list of:

* `*` (every value), a number, or a name (`JAN`-`DEC` in the month, `SUN`-`SAT` in the day of week,
  any case; day of week 0 and 7 are both Sunday);
* a range `a-b` with `a <= b` (`5-5` is exactly 5; a range that wraps around, `FRI-MON`, is
  refused: write `FRI-SAT,SUN-MON`);
* either of those with a step: `*/15`, `10-50/20`.

Or one of the macros `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`),
`@hourly`. Everything else (`?`, `L`, `W`, `#`, `R`/`H`, a step after a single number, seconds or
year fields, `@reboot`) is refused with the field, the value and what to write instead.

The day rule, as Debian's cron: when neither day field starts with `*`, a day matches when
either does (`any`); otherwise both must (`all`). A trigger may choose with `day_match`.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date, datetime

from ade_tasks.errors import AdeError

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
DAY_MATCHES = ("any", "all")
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


class CronSyntaxError(AdeError):
    """A cron expression outside the documented grammar."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] is the value low + i

    def value(self, token: str, text: str, item: str) -> int:
        upper = token.upper()
        if upper in self.names:
            return self.low + self.names.index(upper)
        if not token.isdigit():
            raise _refuse(text, self, item, _unknown(self, token))
        number = int(token)
        if not self.low <= number <= self.high:
            raise _refuse(
                text, self, item, f"{number} is out of range; write a value in {self.bounds}"
            )
        return number

    @property
    def bounds(self) -> str:
        # The day names end with SUN again (7); the range to write ends at SAT.
        names = self.names[:-1] if self.names[-1:] == self.names[:1] else self.names
        named = f" or {names[0]}-{names[-1]}" if names else ""
        return f"{self.low}-{self.high}{named}"


FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, _MONTHS),
    _Field("day-of-week", 0, 7, (*_DAYS, "SUN")),
)
_ITEM = re.compile(r"^(?:(\*)|([0-9A-Za-z]+)(?:-([0-9A-Za-z]+))?)(?:/([0-9]+))?$")


def _refuse(text: str, field: _Field, item: str, why: str) -> CronSyntaxError:
    return CronSyntaxError(f"cron {text!r}: {field.name} field {item!r}: {why}")


def _unknown(field: _Field, token: str) -> str:
    """Why a token is no value of this field, naming the cron dialect it comes from."""
    upper = token.upper()
    if upper in ("R", "H"):
        return (
            f"`{token}` (a random or hashed value) is not supported: each process would pick "
            "its own; write a fixed value, e.g. 17"
        )
    days = field.name in ("day-of-month", "day-of-week")
    if days and ((upper.endswith("W") and upper[:-1].isdigit()) or upper == "LW"):
        return "`W` (nearest weekday) is not supported; write the day itself, e.g. 15"
    if days and (("L" in upper and upper.replace("L", "").isdigit()) or upper == "L"):
        return (
            "`L` (last day) is not supported; write the days explicitly, e.g. 28-31 "
            "(a month without such a day is skipped)"
        )
    kind = {"month": "a month name", "day-of-week": "a day name"}.get(field.name, "a number")
    return f"{token!r} is not {kind}; write a value in {field.bounds}"


def _span(field: _Field, a: int, b: int, named: bool) -> str:
    def show(value: int) -> str:
        return field.names[value - field.low] if named else str(value)

    return show(a) if a == b else f"{show(a)}-{show(b)}"


def _items(text: str, field: _Field, part: str) -> tuple[set[int], str]:
    """The values one field names, and the field with each `n-n` range written `n`."""
    values: set[int] = set()
    canonical = []
    top = 6 if field.name == "day-of-week" else field.high  # SAT: 7 only ever means Sunday
    for item in part.split(","):
        for mark, hint in (("?", "write *"), ("#", _NTH_HINT)):
            if mark in item:
                raise _refuse(text, field, item, f"`{mark}` is not supported; {hint}")
        found = _ITEM.match(item)
        if found is None:
            raise _refuse(text, field, item, _SHAPE_HINT)
        star, first, last, step_text = found.groups()
        if star:
            a, b = field.low, field.high
        else:
            a = field.value(first, text, item)
            b = a if last is None else field.value(last, text, item)
            if field.name == "day-of-week" and b == 0 < a:
                b = 7  # FRI-SUN: Sunday as 7 ends a range
            named = not first.isdigit()
            if a > b:
                head = [] if a > top else [_span(field, a, top, named)]  # 7-1: Sunday is 0 too
                instead = ",".join([*head, _span(field, field.low, b, named)])
                raise _refuse(
                    text, field, item, f"ranges go upward, this one wraps around; write {instead}"
                )
            if step_text is not None and last is None:
                raise _refuse(
                    text,
                    field,
                    item,
                    f"a step needs a range or *: write {first}-{top}/{step_text} "
                    f"(every {step_text} from {first}) or {first}",
                )
        step = 1 if step_text is None else int(step_text)
        if not 1 <= step <= field.high:
            raise _refuse(text, field, item, f"a step must be between 1 and {field.high}")
        values.update(range(a, b + 1, step))
        canonical.append(first if not star and a == b else item)
    return values, ",".join(canonical)


_NTH_HINT = (
    "for the first Monday, write the days with the weekday and day_match: all, e.g. '0 9 1-7 * MON'"
)
_SHAPE_HINT = "write *, a value, a range a-b, or either with a step (*/15, 10-50/20)"


@dataclass(frozen=True)
class CronExpr:
    """A parsed expression: the values of each field, and what Debian's rules need of it."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6
    starred: tuple[bool, ...]  # per field: does it start with `*`
    canonical: str  # the text with every `n-n` range written `n` (what admission stores)

    @property
    def wildcard_time(self) -> bool:
        """Does its minute or hour field start with `*` (Debian's "wildcard job")?"""
        return self.starred[0] or self.starred[1]

    def default_day_match(self) -> str:
        """`any` when neither day field starts with `*`, else `all` (Debian's cron)."""
        return "all" if self.starred[2] or self.starred[4] else "any"

    def day_rule(self, day_match: str | None) -> Callable[[int, int], bool]:
        """Does (day of month, weekday) match, under `day_match` or the default?"""
        days, weekdays = self.days, self.weekdays
        if (day_match or self.default_day_match()) == "any":
            return lambda day, weekday: day in days or weekday in weekdays
        return lambda day, weekday: day in days and weekday in weekdays

    def can_fire(self, day_match: str | None) -> bool:
        """Does some calendar day match? (Every date falls on every weekday within 400 years.)"""
        if (day_match or self.default_day_match()) == "any":
            return True
        longest = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
        return any(day <= longest[month - 1] for month in self.months for day in self.days)


def parse_cron(text: str) -> CronExpr:
    """Parse an expression of the documented grammar; CronSyntaxError says what to write."""
    text = " ".join(text.split())
    if text.startswith("@"):
        text = text.lower()
        expansion = ALIASES.get(text)
        if expansion is None:
            raise CronSyntaxError(
                f"cron {text!r}: unknown macro; write one of {', '.join(ALIASES)} or 5 fields "
                "(minute hour day-of-month month day-of-week)"
            )
        expr = parse_cron(expansion)
        return replace(expr, text=text, canonical=text)
    parts = text.split(" ")
    if len(parts) != 5:
        raise CronSyntaxError(
            f"cron {text!r} has {len(parts)} field(s); write 5: minute hour day-of-month month "
            "day-of-week (no seconds or years), e.g. '0 3 * * 1-5'"
        )
    values = []
    canonical = []
    for field, part in zip(FIELDS, parts, strict=True):
        found, written = _items(text, field, part)
        values.append(frozenset(found))
        canonical.append(written)
    weekdays = frozenset(d % 7 for d in values[4])
    starred = tuple(part.startswith("*") for part in parts)
    minutes, hours, days, months = values[:4]
    return CronExpr(text, minutes, hours, days, months, weekdays, starred, " ".join(canonical))


class WallClock:
    """The wall-clock minutes an expression names, walked forward from any minute."""

    def __init__(self, expr: CronExpr, day_match: str | None) -> None:
        self._day_ok = expr.day_rule(day_match)
        self._months = _next_table(expr.months, 12)
        self._hours = _next_table(expr.hours, 23)
        self._minutes = _next_table(expr.minutes, 59)

    def matches(self, wall: datetime) -> bool:
        """Does this wall-clock minute match every field?"""
        return (
            self._months[wall.month] == wall.month
            and self._hours[wall.hour] == wall.hour
            and self._minutes[wall.minute] == wall.minute
            and self._day_ok(wall.day, (wall.weekday() + 1) % 7)
        )

    def next_match(self, wall: datetime, before: datetime) -> datetime | None:
        """The first matching wall minute at or after `wall` (naive) and before `before`."""
        year, month, day, hour, minute = wall.year, wall.month, wall.day, wall.hour, wall.minute
        months, hours, minutes, day_ok = self._months, self._hours, self._minutes, self._day_ok
        last_year = before.year
        while year <= last_year:
            if months[month] != month:
                nxt = months[month]
                if nxt < 0:
                    year, month = year + 1, months[1]
                else:
                    month = nxt
                day, hour, minute = 1, 0, 0
                continue
            length = _LENGTHS[month] + (month == 2 and calendar.isleap(year))
            while day <= length and not day_ok(day, (date(year, month, day).weekday() + 1) % 7):
                day, hour, minute = day + 1, 0, 0
            if day > length:
                year, month = (year + 1, 1) if month == 12 else (year, month + 1)
                day, hour, minute = 1, 0, 0
                continue
            nxt = hours[hour]
            if nxt < 0:
                day, hour, minute = day + 1, 0, 0
                continue
            if nxt != hour:
                hour, minute = nxt, 0
            nxt = minutes[minute]
            if nxt < 0:
                hour, minute = hour + 1, 0
                if hour == 24:
                    day, hour = day + 1, 0
                continue
            found = datetime(year, month, day, hour, nxt)
            return found if found < before else None
        return None


_LENGTHS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _next_table(values: frozenset[int], high: int) -> tuple[int, ...]:
    """For each i in 0..high+1: the smallest value >= i, or -1."""
    table = []
    for i in range(high + 2):
        table.append(min((v for v in values if v >= i), default=-1))
    return tuple(table)
