"""The schedule grammar (docs/triggers.md, "Cron grammar"): what it accepts, what each accepted
form means, and what it refuses with the field, the value and what to write instead (issue 35,
findings 1, 2, 3 and 5)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ade_tasks.cron.slots import ScheduleSpec, next_fire_times
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import ScheduleTrigger

AFTER = datetime(2026, 12, 6, 23, 59, tzinfo=UTC)  # the minute before Monday 2026-12-07


def fires(cron: str, count: int = 4, **options: Any) -> list[str]:
    """The next fires of a schedule trigger admitted as a rule file would be."""
    trigger = admitted({"cron": cron, **options})
    assert trigger.cron is not None
    policy = {k: getattr(trigger, k, None) for k in ("day_match", "dst_gap", "dst_repeat")}
    extra = {k: v for k, v in policy.items() if v is not None}
    spec = ScheduleSpec("r", 0, trigger.cron, trigger.timezone, None, **extra)
    return [f"{t:%a %m-%d %H:%M}" for t in next_fire_times(spec, AFTER, count)]


def document(trigger: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "r",
        "triggers": [{"type": "schedule", **trigger}],
        "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]},
    }


def refusal(cron: str) -> str:
    parsed = parse_rule(document({"cron": cron}), "r.yaml")
    assert not isinstance(parsed, Rule), f"{cron!r} was accepted"
    (problem,) = parsed
    text = str(problem)
    assert text.startswith("r.yaml:triggers.0.cron: "), text
    return text


def admitted(trigger: dict[str, Any]) -> ScheduleTrigger:
    parsed = parse_rule(document(trigger), "r.yaml")
    assert isinstance(parsed, Rule), parsed
    found = parsed.triggers[0]
    assert isinstance(found, ScheduleTrigger)
    return found


# --- finding 1: an n-n range means exactly n ---------------------------------------------


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("5-5 * * * *", ["Mon 12-07 00:05", "Mon 12-07 01:05", "Mon 12-07 02:05"]),
        ("0 3-3 * * *", ["Mon 12-07 03:00", "Tue 12-08 03:00", "Wed 12-09 03:00"]),
        ("0 0 4-4 * *", ["Mon 01-04 00:00", "Thu 02-04 00:00", "Thu 03-04 00:00"]),
        ("0 0 * * 7-7", ["Sun 12-13 00:00", "Sun 12-20 00:00", "Sun 12-27 00:00"]),
        ("0 0 * * 0-0", ["Sun 12-13 00:00", "Sun 12-20 00:00", "Sun 12-27 00:00"]),
        ("0 0 * * SUN-SUN", ["Sun 12-13 00:00", "Sun 12-20 00:00", "Sun 12-27 00:00"]),
    ],
)
def test_a_range_of_one_value_means_that_value(cron: str, expected: list[str]) -> None:
    assert fires(cron, 3) == expected


def test_admission_stores_a_range_of_one_value_as_the_value() -> None:
    assert admitted({"cron": "5-5 0-0 * * SUN-SUN"}).cron == "5 0 * * SUN"


# --- finding 2 and 5: refused, naming the field, the value and what to write ----------------


@pytest.mark.parametrize(
    ("cron", "says"),
    [
        ("R * * * *", "minute field 'R': `R` (a random or hashed value) is not supported"),
        ("H 3 * * *", "write a fixed value, e.g. 17"),
        ("0 0 15W * *", "day-of-month field '15W': `W` (nearest weekday) is not supported; write"),
        ("0 0 L * *", "day-of-month field 'L': `L` (last day) is not supported; write"),
        ("0 0 * * L5", "day-of-week field 'L5': `L` (last day) is not supported"),
        ("0 0 ? * 1", "day-of-month field '?': `?` is not supported; write *"),
        ("0 0 * * 1#2", "day-of-week field '1#2': `#` is not supported; for the first Monday"),
        (
            "5-1 * * * *",
            "minute field '5-1': ranges go upward, this one wraps around; write 5-59,0-1",
        ),
        (
            "0 23-1 * * *",
            "hour field '23-1': ranges go upward, this one wraps around; write 23,0-1",
        ),
        ("0 0 * * FRI-MON", "this one wraps around; write FRI-SAT,SUN-MON"),
        ("0 0 * * 7-1", "this one wraps around; write 0-1"),
        (
            "0 0 * NOV-FEB *",
            "month field 'NOV-FEB': ranges go upward, this one wraps around; write NOV-DEC,JAN-FEB",
        ),
        ("0 0 * * 1/2", "day-of-week field '1/2': a step needs a range or *: write 1-6/2"),
        ("*/0 * * * *", "minute field '*/0': a step must be between 1 and 59"),
        ("0 24 * * *", "hour field '24': 24 is out of range; write a value in 0-23"),
        ("0 0 * * MON-FUN", "'FUN' is not a day name; write a value in 0-7 or SUN-SAT"),
        ("0 0 * MON *", "'MON' is not a month name; write a value in 1-12 or JAN-DEC"),
        ("0 0 1,,2 * *", "day-of-month field '': write *, a value, a range a-b"),
        ("0 0 * * * 2027", "has 6 field(s); write 5"),
        ("@reboot", "unknown macro; write one of @yearly"),
    ],
)
def test_syntax_outside_the_grammar_is_refused_with_what_to_write(cron: str, says: str) -> None:
    assert says in refusal(cron)


@pytest.mark.parametrize(
    "cron",
    [
        "*/15 9-17 * * MON-FRI",
        "0,30 8-18/2 1-7 JAN,jul *",
        "10-50/20 * * * *",
        "0 0 * * 5-7",
        "@hourly",
        "@Daily",
        "0 12 * dec sun",
    ],
)
def test_the_documented_forms_are_accepted(cron: str) -> None:
    assert admitted({"cron": cron}).cron is not None


def test_names_and_sunday_as_seven_mean_what_they_say() -> None:
    assert fires("0 9 * * FRI-SUN", 3) == ["Fri 12-11 09:00", "Sat 12-12 09:00", "Sun 12-13 09:00"]
    assert fires("0 9 * * 5-7", 3) == fires("0 9 * * FRI-SUN", 3)


# --- finding 3: the day rule, as Debian's cron, and day_match ------------------------------


def test_a_day_field_starting_with_a_star_makes_both_fields_match() -> None:
    # */2 starts with `*`: odd days that are Mondays (2026-12-07 and -21 are odd Mondays).
    assert fires("0 0 */2 * 1", 3) == ["Mon 12-07 00:00", "Mon 12-21 00:00", "Mon 01-11 00:00"]


def test_two_restricted_day_fields_match_either() -> None:
    assert fires("0 0 13 * 5", 3) == ["Fri 12-11 00:00", "Sun 12-13 00:00", "Fri 12-18 00:00"]


def test_day_match_chooses_the_other_rule() -> None:
    assert fires("0 0 13 * 5", 2, day_match="all") == ["Fri 08-13 00:00", "Fri 10-13 00:00"]
    assert fires("0 0 */2 * 1", 3, day_match="any") == [
        "Mon 12-07 00:00",
        "Wed 12-09 00:00",
        "Fri 12-11 00:00",
    ]


def test_admission_writes_down_the_day_rule_where_croniter_read_it_otherwise() -> None:
    assert admitted({"cron": "0 0 */2 * 1"}).day_match == "all"
    assert admitted({"cron": "0 0 13 * 5"}).day_match is None  # both read it as `any`
    assert admitted({"cron": "0 0 */2 * 1", "day_match": "any"}).day_match == "any"


def test_day_options_belong_to_cron_schedules_only() -> None:
    parsed = parse_rule(document({"delay_seconds": 60, "day_match": "all"}), "r.yaml")
    assert not isinstance(parsed, Rule)
    assert "day_match applies to cron schedules only" in str(parsed[0])


# --- finding 5: February 29th ------------------------------------------------------------


def test_february_29th_lists_twenty_fires_skipping_2100() -> None:
    spec = ScheduleSpec("r", 0, "0 0 29 2 *")
    years = [t.year for t in next_fire_times(spec, AFTER, 20)]
    assert years == [*range(2028, 2097, 4), 2104, 2108]


def test_a_day_that_never_comes_is_refused() -> None:
    assert "never fires" in refusal("0 0 30 2 *")
    parsed = parse_rule(document({"cron": "0 0 31 4 MON", "day_match": "all"}), "r.yaml")
    assert not isinstance(parsed, Rule) and "never fires" in str(parsed[0])
    assert admitted({"cron": "0 0 31 4 MON"}).cron == "0 0 31 4 MON"  # any: every Monday
