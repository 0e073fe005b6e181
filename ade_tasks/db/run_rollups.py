"""Run counts and duration histograms whose cost does not grow with history.

`/metrics` used to aggregate the whole `runs` table at every scrape (2 s at a million runs). Now
the finished runs before a *watermark* are summed once into `run_rollups`, one row per
(rule, status); a scrape reads those rows plus the runs the watermark has not passed yet: the
runs finished since (an index range on `finished_at`) and the unfinished ones (`finished_at IS
NULL`, the same index). Both are bounded by the cluster's rate and its live work, not by its age.

The watermark is advanced by a housekeeping job (`advance`, every minute, claimed like the other
sweeps) to `now - LAG`. The lag is there because `finished_at` is written by a worker's clock in a
transaction that commits a moment later: a run whose `finished_at` falls behind the watermark only
after the watermark passed it would be counted nowhere. `LAG` (60 s) bounds both the commit delay
and the clock skew between a worker and the process that advances, the same assumption the run
leases make. The advance locks the watermark row (`SKIP LOCKED` on PostgreSQL), so two beats never
add the same runs twice, and reads the watermark and the rollups in one statement, so a scrape
never counts a run both in the rollup and in the tail.

A finished run never changes again (see `ade_tasks.states.RUN_TRANSITIONS`), and pruning by
`run_retention_days` deletes runs the rollup already counted: counts of finished runs no longer
drop when history is pruned (the counts of `ade_runs` are now "runs recorded", not "rows held").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Float, case, cast, func, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from ade_tasks.clock import utcnow
from ade_tasks.db.rollup_tables import RollupWatermarkRow, RunRollupRow
from ade_tasks.db.rules import in_batches
from ade_tasks.db.schema import RunRow

#: Upper bounds (seconds) of the run duration buckets: a quick command to the 12 h a rule may run.
RUN_DURATION_BUCKETS: tuple[float, ...] = (
    1,
    5,
    15,
    30,
    60,
    120,
    300,
    600,
    1800,
    3600,
    7200,
    21600,
    43200,
)

#: How far behind now the watermark stays (see the module docstring).
LAG = timedelta(seconds=60)
WATERMARK = "runs"


@dataclass
class RunTally:
    """Runs of one (rule, status): how many, and the durations of those that started."""

    runs: int = 0
    timed: int = 0
    seconds: float = 0.0
    #: Cumulative: timed runs at most as long as each bound of RUN_DURATION_BUCKETS.
    buckets: list[int] = field(default_factory=lambda: [0] * len(RUN_DURATION_BUCKETS))

    def add(self, other: RunTally) -> None:
        self.runs += other.runs
        self.timed += other.timed
        self.seconds += other.seconds
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]


Tallies = dict[tuple[str, str], RunTally]


def _duration_seconds(session: Session) -> ColumnElement[Any]:
    """`finished_at - started_at` in seconds, in the dialect's own date arithmetic."""
    if session.get_bind().dialect.name == "postgresql":
        return cast(func.extract("epoch", RunRow.finished_at - RunRow.started_at), Float)
    # SQLite (embedded mode) stores timestamps as text; julianday() reads them.
    return (func.julianday(RunRow.finished_at) - func.julianday(RunRow.started_at)) * 86400.0


def _tally(session: Session, *where: ColumnElement[bool]) -> Tallies:
    """Tallies of the runs `where` selects, by (rule, status), in one aggregate query."""
    seconds = _duration_seconds(session)
    timed = RunRow.started_at.is_not(None) & RunRow.finished_at.is_not(None)
    query = (
        select(
            RunRow.rule_id,
            RunRow.status,
            func.count(),
            func.sum(case((timed, 1), else_=0)),
            func.coalesce(func.sum(case((timed, seconds), else_=0.0)), 0.0),
            *(func.sum(case((timed & (seconds <= b), 1), else_=0)) for b in RUN_DURATION_BUCKETS),
        )
        .where(*where)
        .group_by(RunRow.rule_id, RunRow.status)
    )
    return {
        (rule_id, status): RunTally(
            int(runs), int(n_timed or 0), max(float(total), 0.0), [int(n or 0) for n in cumulative]
        )
        for rule_id, status, runs, n_timed, total, *cumulative in session.execute(query)
    }


def _merge(into: Tallies, more: Iterable[tuple[tuple[str, str], RunTally]]) -> Tallies:
    for key, tally in more:
        into.setdefault(key, RunTally()).add(tally)
    return into


def run_tallies(session: Session) -> Tallies:
    """Every run recorded, by (rule, status): the rollup plus the runs past its watermark."""
    rows = session.execute(
        select(RollupWatermarkRow.rolled_up_to, RunRollupRow)
        .select_from(RollupWatermarkRow)
        .outerjoin(RunRollupRow, RollupWatermarkRow.rolled_up_to.is_not(None))
        .where(RollupWatermarkRow.name == WATERMARK)
    ).all()
    watermark = rows[0][0] if rows else None
    tallies: Tallies = {}
    for _, row in rows:
        if row is not None:
            tally = RunTally(row.runs, row.timed, row.seconds, list(row.buckets))
            _merge(tallies, [((row.rule_id, row.status), tally)])
    if watermark is None:
        return _merge(tallies, _tally(session).items())
    past = RunRow.finished_at.is_(None) | (RunRow.finished_at >= watermark)
    return _merge(tallies, _tally(session, past).items())


def advance(session: Session, now: datetime | None = None) -> int | None:
    """Move the watermark to `now - LAG`, adding the runs it passes to the rollup. Returns how
    many runs it added, or None when another process holds the watermark (it is advancing)."""
    target = (now or utcnow()) - LAG
    watermark = session.scalars(
        select(RollupWatermarkRow)
        .where(RollupWatermarkRow.name == WATERMARK)
        .with_for_update(skip_locked=True)
    ).one_or_none()
    if watermark is None:
        return None
    start = watermark.rolled_up_to
    if start is not None and start >= target:
        return 0
    window = [RunRow.finished_at < target]
    if start is not None:
        window.append(RunRow.finished_at >= start)
    passed = _tally(session, *window)
    stored = {
        (row.rule_id, row.status): row
        for batch in in_batches(sorted({rule for rule, _ in passed}))
        for row in session.scalars(select(RunRollupRow).where(RunRollupRow.rule_id.in_(batch)))
    }
    for (rule_id, status), tally in passed.items():
        row = stored.get((rule_id, status))
        if row is None:
            session.add(
                RunRollupRow(
                    rule_id=rule_id,
                    status=status,
                    runs=tally.runs,
                    timed=tally.timed,
                    seconds=tally.seconds,
                    buckets=tally.buckets,
                )
            )
        else:
            total = RunTally(row.runs, row.timed, row.seconds, list(row.buckets))
            total.add(tally)
            row.runs, row.timed, row.seconds, row.buckets = (
                total.runs,
                total.timed,
                total.seconds,
                total.buckets,
            )
    session.execute(
        update(RollupWatermarkRow)
        .where(RollupWatermarkRow.name == WATERMARK)
        .values(rolled_up_to=target, updated_at=utcnow())
    )
    return sum(tally.runs for tally in passed.values())
