"""The web page's history queries (ade_tasks.db.history) on PostgreSQL and on SQLite (the
embedded mode): the same answers from each dialect's own SQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from ade_tasks.db import history
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from tests.git_project import migrated_sqlite

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionFactory]:
    if request.param == "sqlite":
        yield migrated_sqlite(tmp_path)
        return
    engine = create_db_engine(request.getfixturevalue("database_url"))
    yield create_session_factory(engine)
    engine.dispose()


def add_run(
    sessions: SessionFactory,
    rule: str,
    queued: datetime,
    seconds: float | None,
    status: str = "succeeded",
) -> str:
    run_id = str(uuid.uuid4())
    started = queued + timedelta(seconds=1)
    with sessions.begin() as session:
        session.add(
            RunRow(
                id=run_id, rule_id=rule, rule_version=1, trigger_type="manual", trigger={},
                idempotency_key=run_id, status=status, billing_code=f"auto:{rule}", usage={},
                queue="ade.builtin", queued_at=queued,
                started_at=started if seconds is not None or status == "running" else None,
                finished_at=started + timedelta(seconds=seconds) if seconds is not None else None,
            )
        )  # fmt: skip
    return run_id


def test_recent_durations_are_each_rules_newest_finished_runs_oldest_first(
    sessions: SessionFactory,
) -> None:
    ids = [add_run(sessions, "a", NOW - timedelta(minutes=10 - i), float(i)) for i in range(5)]
    add_run(sessions, "a", NOW, None, status="running")  # not finished: no duration yet
    other = add_run(sessions, "b", NOW, 7.5)
    with sessions() as session:
        found = history.recent_durations(session, ["a", "b", "a", "none"], per_rule=3)
    assert [(r.run_id, r.seconds) for r in found["a"]] == [(ids[2], 2), (ids[3], 3), (ids[4], 4)]
    assert [(r.run_id, r.seconds) for r in found["b"]] == [(other, 7.5)]
    assert found["none"] == []


def test_runs_per_day_by_outcome_count_utc_days_inside_the_window(
    sessions: SessionFactory,
) -> None:
    since = datetime(2026, 3, 1, tzinfo=UTC)
    add_run(sessions, "a", since - timedelta(seconds=1), 1.0)  # before the window
    add_run(sessions, "a", datetime(2026, 3, 1, 0, 0, 5, tzinfo=UTC), 1.0)
    add_run(sessions, "a", datetime(2026, 3, 1, 23, 59, tzinfo=UTC), 1.0, "failed")
    add_run(sessions, "a", datetime(2026, 3, 3, 8, 0, tzinfo=UTC), 1.0)
    add_run(sessions, "a", datetime(2026, 3, 3, 9, 0, tzinfo=UTC), 1.0)
    add_run(sessions, "a", datetime(2026, 3, 3, 9, 30, tzinfo=UTC), None, "queued")
    add_run(sessions, "b", datetime(2026, 3, 3, 9, 0, tzinfo=UTC), 1.0)
    with sessions() as session:
        days = history.daily_outcomes(session, "a", since)
    assert [(d.day, d.counts) for d in days] == [
        (date(2026, 3, 1), {"succeeded": 1, "failed": 1}),
        (date(2026, 3, 3), {"succeeded": 2, "queued": 1}),
    ]


def test_p50_and_p95_per_day_and_over_the_window_interpolate_like_percentile_cont(
    sessions: SessionFactory,
) -> None:
    since = datetime(2026, 3, 1, tzinfo=UTC)
    for i, seconds in enumerate([1.0, 2.0, 3.0, 4.0, 10.0]):
        add_run(sessions, "a", datetime(2026, 3, 2, 10, i, tzinfo=UTC), seconds)
    add_run(sessions, "a", datetime(2026, 3, 4, 10, 0, tzinfo=UTC), 20.0, "failed")
    add_run(sessions, "a", datetime(2026, 3, 4, 11, 0, tzinfo=UTC), None, "running")
    add_run(sessions, "a", since - timedelta(days=1), 500.0)  # outside the window
    with sessions() as session:
        stats = history.duration_stats(session, "a", since)
        empty = history.duration_stats(session, "nothing", since)
    first, second = stats.days
    assert (first.day, first.p50, first.runs) == (date(2026, 3, 2), 3.0, 5)
    assert first.p95 == pytest.approx(8.8)  # 4 + 0.8 * (10 - 4)
    assert (second.day, second.p50, second.p95, second.runs) == (date(2026, 3, 4), 20, 20, 1)
    assert (stats.p50, stats.runs) == (3.5, 6)
    assert stats.p95 == pytest.approx(17.5)
    assert (empty.days, empty.p50, empty.p95, empty.runs) == ([], None, None, 0)


def test_occurrences_come_with_the_status_of_the_run_they_fired(
    sessions: SessionFactory,
) -> None:
    run_id = add_run(sessions, "a", NOW, None, "running")
    with sessions.begin() as session:
        for minutes, outcome, fired in ((1, "fired", run_id), (2, "skipped", None)):
            slot = NOW - timedelta(minutes=minutes)
            session.add(
                ScheduleOccurrenceRow(
                    rule_id="a", trigger_index=0, cron="* * * * *", slot=slot,
                    claimed_by="beat", claimed_at=slot, outcome=outcome, run_id=fired,
                    reason=None if fired else "overlap", duplicate_claims=0,
                )
            )  # fmt: skip
    with sessions() as session:
        found = history.occurrence_outcomes(session, "a", 10)
    assert [(o.outcome, o.run_id, o.run_status, o.reason) for o in found] == [
        ("fired", run_id, "running", None),
        ("skipped", None, None, "overlap"),
    ]
