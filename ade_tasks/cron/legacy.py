"""Stored expressions whose meaning changed when this project stopped reading cron through
croniter, which read every `n-n` range as `*` and took a day when either day field matched as
soon as neither was literally `*`.

Admission now stores `n-n` as `n` and writes `day_match` when the day rule differs from what
croniter did, so a stored trigger that still has either was stored by an earlier version: it is
that trigger's problem (it does not fire) until the rule is stored again, which confirms the
meaning it now has, or edited to say which one it means.
"""

from __future__ import annotations

from ade_tasks.cron.grammar import ALIASES, CronExpr


def meaning_change(expr: CronExpr, day_match: str | None) -> str | None:
    """Why a stored trigger's expression would now fire at other times than it did, or None."""
    if expr.text != expr.canonical:
        return (
            f"cron {expr.text!r} was stored by an earlier version, which read a range like "
            f"5-5 as * (every value); it now means that one value ({expr.canonical!r}). It "
            "does not fire until the rule is stored again: sync its file or save it to take "
            "the new meaning, or write * where every value was meant"
        )
    if day_match is None and _days_differ(expr):
        rule = expr.default_day_match()
        now = "both to match" if rule == "all" else "either to match"
        return (
            f"cron {expr.text!r} was stored by an earlier version, which read its day-of-month "
            f"and day-of-week fields {_OLD[_croniter_or(expr)]}; it now takes days as Debian's "
            f"cron does ({now}). It does not fire until the trigger says which it means: add "
            "`day_match: all` (both must match) or `day_match: any` (either), or sync its file "
            f"again to take `{rule}`"
        )
    return None


def admitted_day_match(expr: CronExpr, day_match: str | None) -> str | None:
    """The `day_match` admission stores: the rule as written, made explicit where croniter
    would have read the days otherwise (so a stored trigger without it is an old one)."""
    if day_match is None and _days_differ(expr):
        return expr.default_day_match()
    return day_match


_OLD = {True: "as either-matches", False: "as both-must-match"}


def _croniter_or(expr: CronExpr) -> bool:
    fields = ALIASES.get(expr.text, expr.text).split(" ")
    return fields[2] != "*" and fields[4] != "*"


def _days_differ(expr: CronExpr) -> bool:
    """Would croniter and this grammar's default take different (day, weekday) pairs?"""
    new = expr.day_rule(None)
    days, weekdays = expr.days, expr.weekdays
    if _croniter_or(expr):

        def old(day: int, weekday: int) -> bool:
            return day in days or weekday in weekdays

    else:

        def old(day: int, weekday: int) -> bool:
            return day in days and weekday in weekdays

    return any(old(d, w) != new(d, w) for d in range(1, 32) for w in range(7))
