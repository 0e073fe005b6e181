"""The run rollup: /metrics' run counts and durations are the same whether a run is counted in
`run_rollups` or read past the watermark, each run is counted once, and pruning lowers nothing."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import delete, select

from ade_tasks.db import run_rollups
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.metrics import DurationHistogram, cluster_facts
from ade_tasks.db.rollup_tables import RollupWatermarkRow, RunRollupRow
from ade_tasks.db.schema import RunRow
from tests.unit.ade_api.http.routes.test_metrics import NOW, populated, run_row  # noqa: F401  (fixture)


def facts_of(
    session_factory: SessionFactory,
) -> tuple[dict[tuple[str, str], int], dict[str, DurationHistogram]]:
    with session_factory() as session:
        facts = cluster_facts(session)
    return facts.runs, facts.durations


def advance(session_factory: SessionFactory, now: datetime) -> int | None:
    with session_factory.begin() as session:
        return run_rollups.advance(session, now)


def test_a_run_counts_the_same_in_the_rollup_as_past_the_watermark(
    populated: SessionFactory,  # noqa: F811
) -> None:
    before = facts_of(populated)
    assert advance(populated, NOW + timedelta(minutes=2)) == 3  # the finished ones
    with populated() as session:
        rows = session.scalars(select(RunRollupRow)).all()
        watermark = session.get(RollupWatermarkRow, "runs")
    assert sorted((row.rule_id, row.status, row.runs) for row in rows) == [
        ("billed", "failed", 1),
        ("billed", "succeeded", 2),
    ]
    assert watermark is not None and watermark.rolled_up_to == NOW + timedelta(minutes=1)
    assert facts_of(populated) == before
    # the same window again adds nothing: no run is counted twice
    assert advance(populated, NOW + timedelta(minutes=2)) == 0
    assert facts_of(populated) == before


def test_runs_finishing_after_the_watermark_join_the_rollup_once(
    populated: SessionFactory,  # noqa: F811
) -> None:
    advance(populated, NOW + timedelta(minutes=2))
    late = run_row("billed", "succeeded", 3)
    late.finished_at = NOW + timedelta(seconds=100)  # past the watermark (NOW + 60 s)
    late.started_at = late.finished_at - timedelta(seconds=3)
    with populated.begin() as session:
        session.add(late)
    runs, durations = facts_of(populated)
    assert runs[("billed", "succeeded")] == 3
    assert advance(populated, NOW + timedelta(minutes=5)) == 1
    assert facts_of(populated) == (runs, durations)
    histogram = durations["billed"]
    assert histogram.count == 4 and dict(histogram.buckets)[5] == 2


def test_pruning_history_does_not_lower_the_finished_counts(
    populated: SessionFactory,  # noqa: F811
) -> None:
    advance(populated, NOW + timedelta(minutes=2))
    runs, durations = facts_of(populated)
    with populated.begin() as session:
        session.execute(delete(RunRow).where(RunRow.finished_at.is_not(None)))
    assert facts_of(populated) == (runs, durations)


def test_unfinished_runs_are_counted_live_until_they_finish(
    populated: SessionFactory,  # noqa: F811
) -> None:
    advance(populated, NOW + timedelta(minutes=2))
    runs, _ = facts_of(populated)
    assert runs[("plain", "queued")] == 1
    with populated.begin() as session:
        queued = session.scalars(select(RunRow).where(RunRow.status == "queued")).one()
        queued.status = "succeeded"
        queued.started_at = NOW + timedelta(seconds=80)
        queued.finished_at = NOW + timedelta(seconds=90)
    runs, durations = facts_of(populated)
    assert ("plain", "queued") not in runs and runs[("plain", "succeeded")] == 1
    assert durations["plain"].count == 1 and durations["plain"].sum_seconds == pytest.approx(
        10, abs=0.01
    )
