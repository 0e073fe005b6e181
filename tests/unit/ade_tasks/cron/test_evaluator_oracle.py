"""The evaluator against an oracle: a reference written from docs/triggers.md alone (its own
parser, Debian's day rule and DST defaults, brute force minute by minute: convert each UTC minute
to local time, check the fields), over 300+ expressions with every day rule and DST policy, five
zones (Australia/Lord_Howe shifts by 30 minutes) and start instants around every DST change of
2026-2027. Not one slot may differ.

Minute by minute, vectorized: each local field value is a bitmask over the window's minutes (a
Python int, bit i = minute i), so an expression's matches are a few dozen ORs and ANDs of masks.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import product
from zoneinfo import ZoneInfo

from ade_tasks.cron.evaluator import Evaluator
from ade_tasks.cron.grammar import parse_cron

MINUTE = timedelta(minutes=1)
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Australia/Adelaide")
MONTHS = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()
DAYS = "SUN MON TUE WED THU FRI SAT".split()
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
K = 24  # slots compared from each start

# --- the reference: the documented grammar and policies, as plainly as they read -----------


def values(text: str, field: int) -> set[int]:
    low, high = BOUNDS[field]
    names = {n: i + 1 for i, n in enumerate(MONTHS)} if field == 3 else {}
    if field == 4:
        names = {n: i for i, n in enumerate(DAYS)}
    found: set[int] = set()
    for item in text.split(","):
        body, _, step = item.partition("/")
        if body == "*":
            a, b = low, high
        else:
            first, _, last = body.partition("-")
            a = names.get(first.upper(), None) if not first.isdigit() else int(first)
            b = a if not last else (int(last) if last.isdigit() else names[last.upper()])
            assert a is not None and b is not None
            if field == 4 and b == 0 < a:  # FRI-SUN
                b = 7
        found |= set(range(a, b + 1, int(step or 1)))
    return {v % 7 for v in found} if field == 4 else found


@dataclass(frozen=True)
class Reference:
    fields: tuple[set[int], ...]
    any_day: bool
    gap: str
    repeat: str

    @classmethod
    def of(cls, cron: str, day: str | None, gap: str | None, repeat: str | None) -> Reference:
        parts = MACROS.get(cron, cron).split()
        wildcard = parts[0].startswith("*") or parts[1].startswith("*")
        default_any = not parts[2].startswith("*") and not parts[4].startswith("*")
        return cls(
            tuple(values(p, i) for i, p in enumerate(parts)),
            day == "any" if day else default_any,
            gap or ("skip" if wildcard else "shift"),
            repeat or ("both" if wildcard else "first"),
        )

    def matches(self, wall: datetime) -> bool:
        minute, hour, dom, month, dow = self.fields
        weekday = (wall.weekday() + 1) % 7
        days = (wall.day in dom, weekday in dow)
        day_ok = any(days) if self.any_day else all(days)
        return wall.minute in minute and wall.hour in hour and wall.month in month and day_ok


class Window:
    """Every UTC minute of [start, end) in one zone, as bitmasks of local field values."""

    def __init__(self, zone: str, start: datetime, end: datetime) -> None:
        self.start, self.end = start, end
        tz = ZoneInfo(zone)
        self.masks = [[0] * 60, [0] * 24, [0] * 32, [0] * 13, [0] * 7]
        self.first_pass = self.second_pass = 0
        self.gaps: list[tuple[int, list[datetime]]] = []  # minute after a gap, skipped walls
        previous = None
        moment, bit = start, 0
        while moment < end:
            local = moment.astimezone(tz)
            wall = local.replace(tzinfo=None)
            one = 1 << bit
            for field, value in enumerate(
                (wall.minute, wall.hour, wall.day, wall.month, (wall.weekday() + 1) % 7)
            ):
                self.masks[field][value] |= one
            passes = {wall.replace(tzinfo=tz, fold=f).astimezone(UTC) for f in (0, 1)}
            if len(passes) == 2:  # this wall time happens twice
                if moment == min(passes):
                    self.first_pass |= one
                else:
                    self.second_pass |= one
            if previous is not None and wall - previous > MINUTE:
                skipped = []
                missing = previous + MINUTE
                while missing < wall:
                    skipped.append(missing)
                    missing += MINUTE
                self.gaps.append((bit, skipped))
            previous, moment, bit = wall, moment + MINUTE, bit + 1

    def fires(self, ref: Reference) -> int:
        """The bitmask of minutes at which the reference fires."""

        def union(field: int) -> int:
            mask = 0
            for value in ref.fields[field]:
                mask |= self.masks[field][value]
            return mask

        dom, dow = union(2), union(4)
        days = (dom | dow) if ref.any_day else (dom & dow)
        found = union(0) & union(1) & union(3) & days
        if ref.repeat == "first":
            found &= ~self.second_pass
        elif ref.repeat == "last":
            found &= ~self.first_pass
        if ref.gap == "shift":
            for bit, skipped in self.gaps:
                if any(ref.matches(wall) for wall in skipped):
                    found |= 1 << bit
        return found

    def slots(self, mask: int, after: datetime, count: int) -> list[datetime]:
        """The first `count` slots of `mask` after `after` in this window."""
        first = int((after - self.start) / MINUTE) + 1
        mask >>= first
        found = []
        while mask and len(found) < count:
            low = mask & -mask
            index = low.bit_length() - 1
            found.append(after + (index + 1) * MINUTE)
            mask ^= low
        return found


def dst_changes(zone: str) -> list[datetime]:
    """The UTC minutes at which the zone's offset changes in 2026-2027, found hour by hour."""
    tz = ZoneInfo(zone)
    changes = []
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    offset = moment.astimezone(tz).utcoffset()
    while moment.year < 2028:
        later = moment + timedelta(hours=1)
        if later.astimezone(tz).utcoffset() != offset:
            minute = moment
            while minute.astimezone(tz).utcoffset() == offset:
                minute += MINUTE
            changes.append(minute)
            offset = later.astimezone(tz).utcoffset()
        moment = later
    return changes


# --- the expressions ------------------------------------------------------------------------

CURATED = [
    "30 2 * * *",
    "0 2 * * *",
    "59 1 * * *",
    "0 3 * * *",
    "30 1 * * *",
    "15 * * * *",
    "*/7 * * * *",
    "0-59/20 * * * *",
    "*/20 * * * *",
    "* 2 * * *",
    "*/10 1-3 * * *",
    "45 1,2 * * *",
    "0,30 * * * *",
    "5-5 * * * *",
    "0 3-3 * * *",
    "@hourly",
    "@daily",
    "@weekly",
    "@monthly",
    "@yearly",
    "* * * * *",
    "0 0 */2 * 1",
    "0 0 13 * 5",
    "0 2 * * SUN",
    "30 2 * * 0",
    "0 2,14 * * *",
    "15,45 2 25-31 3,10 *",
    "0 0-6/2 * * *",
    "*/15 0-4 * * SAT-SUN",
    "0 0 * * 7-7",
    "0 1 1-7 * MON",
    "59 23 * * *",
    "0 0 29 2 *",
    "0 12 * DEC FRI-SUN",
]


def field_text(rng: random.Random, field: int) -> str:
    low, high = BOUNDS[field]
    high = 6 if field == 4 else high

    def value() -> str:
        number = rng.randint(low, high)
        if field == 3 and rng.random() < 0.3:
            return MONTHS[number - 1]
        if field == 4 and rng.random() < 0.3:
            return DAYS[number]
        return str(number)

    def item() -> str:
        kind = rng.random()
        if kind < 0.25:
            return value()
        a = rng.randint(low, high)
        b = rng.randint(a, high)
        step = f"/{rng.randint(1, max(1, (high - low) // 2))}" if rng.random() < 0.4 else ""
        if kind < 0.45:
            return f"*{step or '/' + str(rng.randint(1, 5))}"
        return f"{a}-{b}{step}"

    if rng.random() < (0.2 if field < 2 else 0.6):
        return "*"
    return ",".join(item() for _ in range(rng.choice((1, 1, 1, 2, 3))))


def expressions() -> list[str]:
    rng = random.Random(35)
    generated = []
    while len(generated) < 290:
        cron = " ".join(field_text(rng, f) for f in range(5))
        parse_cron(cron)  # the generator writes the grammar only
        generated.append(cron)
    return CURATED + generated


POLICIES = list(
    product((None, "any", "all"), (None, "skip", "shift"), (None, "first", "last", "both"))
)


def test_the_evaluator_agrees_with_the_reference_minute_by_minute() -> None:
    crons = expressions()
    assert len(crons) >= 300
    changes = {zone: dst_changes(zone) for zone in ZONES}
    assert len(changes["Australia/Lord_Howe"]) == 4 and len(changes["Europe/Berlin"]) == 4
    compared = 0
    disagreements: list[str] = []
    for zone in ZONES:
        for change in changes[zone] or changes["Europe/Berlin"]:
            window = Window(zone, change - timedelta(hours=26), change + timedelta(hours=26))
            starts = [change + timedelta(minutes=m) for m in (-65, -31, -1, 0, 29)]
            for index, cron in enumerate(crons):
                day, gap, repeat = POLICIES[index % len(POLICIES)]
                ref = Reference.of(cron, day, gap, repeat)
                if not ref.any_day and not parse_cron(cron).can_fire("all"):
                    continue
                mask = window.fires(ref)
                evaluator = Evaluator(parse_cron(cron), zone, day, gap, repeat)
                for start in starts:
                    expected = window.slots(mask, start, K)
                    got = walk(evaluator.next_after, start, window.end, K)
                    compared += 1
                    if got != expected:
                        disagreements.append(
                            f"{cron!r} {zone} day={day} gap={gap} repeat={repeat} from "
                            f"{start:%Y-%m-%d %H:%M}Z: evaluator {show(got)} reference "
                            f"{show(expected)}"
                        )
    assert compared > 25_000
    assert disagreements == [], f"{len(disagreements)} disagreements:\n" + "\n".join(
        disagreements[:20]
    )


def walk(
    next_after: Callable[[datetime], datetime], start: datetime, end: datetime, count: int
) -> list[datetime]:
    found = []
    moment = start
    while len(found) < count:
        moment = next_after(moment)
        if moment >= end:
            break
        found.append(moment)
    return found


def show(slots: list[datetime]) -> list[str]:
    return [f"{s:%m-%d %H:%M}" for s in slots[:6]]


def test_the_evaluator_agrees_with_the_reference_day_by_day_over_two_years() -> None:
    """The calendar side (day of month, weekday, month, the day rule, leap days) over all of
    2026-2027 in UTC: each day's fields as bitmasks over the days, then each matching day's
    minutes, against the first fires from starts spread over the two years."""
    first_day = datetime(2026, 1, 1, tzinfo=UTC)
    days = [first_day + timedelta(days=n) for n in range(730)]
    masks: list[list[int]] = [[0] * 32, [0] * 13, [0] * 7]
    for bit, day in enumerate(days):
        for field, value in enumerate((day.day, day.month, (day.weekday() + 1) % 7)):
            masks[field][value] |= 1 << bit
    starts = [first_day + timedelta(days=n, minutes=37 * n) for n in (0, 45, 150, 300, 420, 600)]
    disagreements = []
    for index, cron in enumerate(expressions()):
        day, _, _ = POLICIES[index % len(POLICIES)]
        ref = Reference.of(cron, day, None, None)
        if not ref.any_day and not parse_cron(cron).can_fire("all"):
            continue
        minute, hour, dom, month, dow = ref.fields

        def union(field: int, values: set[int]) -> int:
            mask = 0
            for value in values:
                mask |= masks[field][value]
            return mask

        on_day, on_weekday = union(0, dom), union(2, dow)
        matching = ((on_day | on_weekday) if ref.any_day else (on_day & on_weekday)) & union(
            1, month
        )
        times = sorted(timedelta(hours=h, minutes=m) for h in hour for m in minute)
        matched = [bit for bit in range(len(days)) if matching >> bit & 1]
        evaluator = Evaluator(parse_cron(cron), "UTC", day)
        for start in starts:
            expected: list[datetime] = []
            for bit in matched[bisect_left(matched, (start - first_day).days) :]:
                expected += [days[bit] + t for t in times if days[bit] + t > start]
                if len(expected) >= 8:
                    break
            expected = expected[:8]
            got = walk(evaluator.next_after, start, days[-1] + timedelta(days=1), len(expected))
            if got != expected:
                disagreements.append(
                    f"{cron!r} day={day} from {start}: {show(got)} {show(expected)}"
                )
    assert disagreements == [], "\n".join(disagreements[:20])
