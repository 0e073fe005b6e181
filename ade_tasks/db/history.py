"""Run-history aggregates the web page charts: recent durations per rule, runs per day by
outcome, and p50/p95 durations per day.

Every query is bounded twice: by rule (equality on `runs.rule_id`) and by a window (the newest
N runs, or `queued_at >= since`), so each one is a range scan of `ix_runs_rule_id_queued_at` and
costs what the window holds, never what the whole history holds. Days are UTC days of
`queued_at`; a duration is `finished_at - started_at` of a run that started and finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import Date, Float, cast, func, select, union_all
from sqlalchemy.orm import Session

from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow

#: How far back the rule page's charts look.
WINDOW = timedelta(days=30)


@dataclass(frozen=True)
class RecentRun:
    """One finished run's duration, for a sparkline."""

    run_id: str
    seconds: float


@dataclass(frozen=True)
class DayOutcomes:
    """How a rule's runs queued on one UTC day ended (status -> runs)."""

    day: date
    counts: dict[str, int]


@dataclass(frozen=True)
class DayDurations:
    """The median and 95th percentile duration of one day's finished runs (seconds)."""

    day: date
    p50: float
    p95: float
    runs: int


@dataclass(frozen=True)
class DurationStats:
    """p50/p95 per day and over the whole window."""

    days: list[DayDurations]
    p50: float | None
    p95: float | None
    runs: int


@dataclass(frozen=True)
class OccurrenceOutcome:
    """A schedule occurrence and, when it fired, the status of its run."""

    slot: datetime
    cron: str
    outcome: str
    reason: str | None
    run_id: str | None
    run_status: str | None


def _finished() -> list[Any]:
    return [RunRow.started_at.is_not(None), RunRow.finished_at.is_not(None)]


def recent_durations(
    session: Session, rule_ids: Sequence[str], per_rule: int = 20
) -> dict[str, list[RecentRun]]:
    """The durations of each rule's newest `per_rule` finished runs, oldest first.

    One statement: a UNION ALL of one bounded index scan per rule (a window function over the
    rules' runs would read their whole history first).
    """
    wanted = sorted(set(rule_ids))
    if not wanted:
        return {}
    parts = []
    for rule_id in wanted:
        newest = (
            select(
                RunRow.rule_id, RunRow.id, RunRow.queued_at, RunRow.started_at, RunRow.finished_at
            )
            .where(RunRow.rule_id == rule_id, *_finished())
            .order_by(RunRow.queued_at.desc())
            .limit(per_rule)
            .subquery()
        )
        parts.append(select(*newest.c))  # SQLite takes LIMIT in a union only inside a subquery
    found: dict[str, list[RecentRun]] = {rule_id: [] for rule_id in wanted}
    rows = session.execute(union_all(*parts)).all()
    for rule_id, run_id, _, started, finished in sorted(rows, key=lambda row: row[2]):
        found[rule_id].append(RecentRun(run_id, _seconds(started, finished)))
    return found


def _seconds(started: datetime, finished: datetime) -> float:
    return max(0.0, (finished - started).total_seconds())


def _day(session: Session) -> Any:
    """The UTC day of `queued_at`, in the dialect's own terms."""
    if session.get_bind().dialect.name == "postgresql":
        return cast(func.timezone("UTC", RunRow.queued_at), Date)
    # SQLite (embedded mode) stores UTC timestamps as ISO text: the day is its first 10 chars.
    return func.substr(RunRow.queued_at, 1, 10)


def _as_date(value: Any) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value)[:10])


def daily_outcomes(session: Session, rule_id: str, since: datetime) -> list[DayOutcomes]:
    """Runs of `rule_id` queued since `since`, counted per UTC day and status, oldest day first
    (days without runs are left out)."""
    day = _day(session).label("day")
    rows = session.execute(
        select(day, RunRow.status, func.count())
        .where(RunRow.rule_id == rule_id, RunRow.queued_at >= since)
        .group_by(day, RunRow.status)
    ).all()
    days: dict[date, dict[str, int]] = {}
    for value, status, count in rows:
        days.setdefault(_as_date(value), {})[status] = int(count)
    return [DayOutcomes(d, days[d]) for d in sorted(days)]


def duration_stats(session: Session, rule_id: str, since: datetime) -> DurationStats:
    """p50/p95 durations of `rule_id`'s finished runs queued since `since`, per UTC day and
    over the window."""
    if session.get_bind().dialect.name == "postgresql":
        return _duration_stats_pg(session, rule_id, since)
    day = _day(session).label("day")
    rows = session.execute(
        select(day, RunRow.started_at, RunRow.finished_at).where(
            RunRow.rule_id == rule_id, RunRow.queued_at >= since, *_finished()
        )
    ).all()
    per_day: dict[date, list[float]] = {}
    for value, started, finished in rows:
        per_day.setdefault(_as_date(value), []).append(_seconds(started, finished))
    days = [
        DayDurations(d, percentile(v, 0.5), percentile(v, 0.95), len(v))
        for d, v in sorted(per_day.items())
    ]
    everything = [s for values in per_day.values() for s in values]
    if not everything:
        return DurationStats(days, None, None, 0)
    return DurationStats(
        days, percentile(everything, 0.5), percentile(everything, 0.95), len(everything)
    )


def _duration_stats_pg(session: Session, rule_id: str, since: datetime) -> DurationStats:
    # PostgreSQL computes the percentiles itself, so a busy rule's runs never leave the server;
    # ROLLUP adds the window's overall row (day NULL) in the same scan.
    day = _day(session).label("day")
    seconds = cast(func.extract("epoch", RunRow.finished_at - RunRow.started_at), Float)
    rows = session.execute(
        select(
            day,
            func.percentile_cont(0.5).within_group(seconds),
            func.percentile_cont(0.95).within_group(seconds),
            func.count(),
        )
        .where(RunRow.rule_id == rule_id, RunRow.queued_at >= since, *_finished())
        .group_by(func.rollup(day))
    ).all()
    days: list[DayDurations] = []
    overall: tuple[float | None, float | None, int] = (None, None, 0)
    for value, p50, p95, count in rows:
        if value is None:
            if not count:  # ROLLUP's total row is there even when no run matched
                continue
            overall = (max(0.0, float(p50)), max(0.0, float(p95)), int(count))
        else:
            days.append(DayDurations(_as_date(value), max(0.0, p50), max(0.0, p95), int(count)))
    return DurationStats(sorted(days, key=lambda d: d.day), *overall)


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile of `values` by linear interpolation (PostgreSQL's percentile_cont)."""
    if not values:
        raise ValueError("percentile of no values; pass at least one")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def occurrence_outcomes(session: Session, rule_id: str, limit: int) -> list[OccurrenceOutcome]:
    """A rule's newest schedule occurrences with the status of the run each one fired."""
    rows = session.execute(
        select(
            ScheduleOccurrenceRow.slot,
            ScheduleOccurrenceRow.cron,
            ScheduleOccurrenceRow.outcome,
            ScheduleOccurrenceRow.reason,
            ScheduleOccurrenceRow.run_id,
            RunRow.status,
        )
        .outerjoin(RunRow, RunRow.id == ScheduleOccurrenceRow.run_id)
        .where(ScheduleOccurrenceRow.rule_id == rule_id)
        .order_by(ScheduleOccurrenceRow.slot.desc(), ScheduleOccurrenceRow.trigger_index)
        .limit(limit)
    ).all()
    return [OccurrenceOutcome(*row) for row in rows]
