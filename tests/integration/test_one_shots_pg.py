"""One-shot runs against PostgreSQL: beats racing over runs due in the same second fire each
once, both as in-process beats on their own engines and as real `ade-tasks beat` processes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from ade_tasks.clock import utcnow
from ade_tasks.db import one_shots as once_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.schema import RunRow, ScheduledRunRow
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.schedule.scheduler import Scheduler
from ade_tasks.testing import InMemorySender
from tests.integration.conftest import Cluster
from tests.integration.test_run_path import add_rule
from tests.support import wait_until

RULE = (
    "- id: once-{n:04d}\n"
    "  triggers: [{{type: schedule, run_at: '{at}'}}, {{type: manual}}]\n"
    "  execution: {{kind: built-in, actions: [{{type: run-command, command: 'true'}}]}}\n"
)


def write_one_shot_rules(rules_dir: Path, count: int, at: datetime) -> None:
    """`count` rules, each with one `run_at` trigger due at `at`."""
    rules_dir.mkdir(parents=True, exist_ok=True)
    text = "".join(RULE.format(n=n, at=at.isoformat()) for n in range(count))
    (rules_dir / "once.yaml").write_text(text)


@pytest.fixture
def factories(database_url: str) -> Iterator[list[SessionFactory]]:
    """One engine per beat, as separate beat processes would have."""
    engines = [create_db_engine(database_url) for _ in range(4)]
    yield [create_session_factory(engine) for engine in engines]
    for engine in engines:
        engine.dispose()


def outcomes(session_factory: SessionFactory) -> tuple[dict[str, int], list[str], int]:
    """Scheduled runs by status, the scheduled run ids the runs name, and the runs."""
    with session_factory() as session:
        by_status = dict(
            session.execute(
                select(ScheduledRunRow.status, func.count()).group_by(ScheduledRunRow.status)
            ).all()
        )
        runs = session.execute(select(RunRow.trigger)).scalars().all()
    return by_status, [t["scheduled_run"] for t in runs], len(runs)


def test_three_beats_racing_over_500_runs_due_in_the_same_second_fire_each_once(
    factories: list[SessionFactory], tmp_path: Path
) -> None:
    # Given 250 rule triggers and 250 scheduled manual runs, all due in the same second
    due = utcnow().replace(microsecond=0) - timedelta(seconds=1)
    with factories[0].begin() as session:
        for n in range(250):
            once_db.schedule_manual(session, "manual-target", due, inputs={}, requested_by=str(n))
    write_target_and_triggers(factories[0], tmp_path / "rules", 250, due)
    beats = [Scheduler(factories[n + 1], InMemorySender(), f"beat-{n}") for n in range(3)]

    # When the three beats tick at the same moments, concurrently
    errors: list[BaseException] = []

    def tick(beat: Scheduler) -> None:
        try:
            beat.tick()
        except BaseException as exc:  # surfaced below, so a failing beat fails the test
            errors.append(exc)

    for _ in range(3):
        threads = [threading.Thread(target=tick, args=(beat,)) for beat in beats]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors[0]

    # Then every scheduled run fired exactly once
    by_status, named, count = outcomes(factories[0])
    assert by_status == {"fired": 500}
    assert count == 500 and len(set(named)) == 500


def write_target_and_triggers(
    session_factory: SessionFactory, rules_dir: Path, triggers: int, due: datetime
) -> None:
    """`triggers` one-shot rules due at `due`, and the rule the manual runs are of."""
    write_one_shot_rules(rules_dir, triggers, due)
    (rules_dir / "target.yaml").write_text(
        "id: manual-target\ntriggers: [{type: manual}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n"
        "guardrails: {overlap: allow-all}\n"
    )
    loaded, _ = sync_rules_dir(session_factory, rules_dir)
    assert not loaded.problems, loaded.problems[:3]


def test_three_real_beats_fire_500_run_at_triggers_due_in_the_same_second_once(
    cluster: Cluster,
) -> None:
    # Given three running beats, and 500 rules whose run_at is the same second, synced while
    # they run: due after two of their refreshes (every 5 s), however slowly the beats started
    # No worker runs these 500 runs: keep the recovery sweep from re-sending them all.
    cluster.env["ADE_REQUEUE_AFTER_SECONDS"] = "3600"
    beats = [cluster.beat() for _ in range(3)]
    due = (utcnow() + timedelta(seconds=11)).replace(microsecond=0)
    write_one_shot_rules(cluster.tmp / "rules", 500, due)
    cluster.sync_rules(cluster.tmp / "rules")
    assert utcnow() < due, "syncing the rules took too long; the runs came due before it ended"

    # When the second comes and goes
    def settled() -> bool:
        by_status, _, _ = outcomes(cluster.session_factory)
        return by_status == {"fired": 500}

    wait_until(settled, 90, "the 500 scheduled runs to be fired")

    # Then each fired once, every beat still runs, and none fired long after it was due
    _, named, count = outcomes(cluster.session_factory)
    assert count == 500 and len(set(named)) == 500
    assert all(beat.proc.poll() is None for beat in beats)
    with cluster.session_factory() as session:
        latest = session.scalar(select(func.max(RunRow.queued_at)))
    assert latest is not None and latest - due < timedelta(seconds=15)


@pytest.fixture
def api(cluster: Cluster) -> httpx.Client:
    add_rule(cluster, "later", '            - {id: a, type: run-command, command: "echo later"}')
    return cluster.api()


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"run_at": "2030-12-24T18:00:00"}, "body.run_at: Value error, run_at 2030-12-24T18:00:00 "
         "has no time zone"),
        ({"run_at": "2020-12-24T18:00:00Z"}, "body.run_at: Value error, run_at 2020-12-24T18:00:00"
         "+00:00 is "),
        ({"run_at": "2030-12-24T18:00:00Z", "delay_seconds": 5}, "body.delay_seconds: Value "
         "error, give run_at or delay_seconds, not both"),
        ({"delay_seconds": -1}, "body.delay_seconds: Value error, delay_seconds must be 0 or "
         "more (got -1)"),
    ],
)  # fmt: skip
def test_a_bad_scheduled_manual_run_is_refused_with_the_field(
    api: httpx.Client, body: dict[str, object], detail: str
) -> None:
    response = api.post("/api/v1/rules/later/runs", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(detail), response.json()["detail"]


def test_a_scheduled_manual_run_is_listed_cancelled_once_and_never_fires(
    cluster: Cluster, api: httpx.Client
) -> None:
    # Given a run scheduled an hour from now
    accepted = api.post("/api/v1/rules/later/runs", json={"delay_seconds": 3600})
    assert accepted.status_code == 202, accepted.text
    scheduled = accepted.json()
    assert scheduled["status"] == "pending" and scheduled["trigger_index"] is None
    assert accepted.headers["Location"].endswith(f"/api/v1/scheduled-runs/{scheduled['id']}")

    # When it is listed and cancelled, then cancelled again
    listed = api.get("/api/v1/scheduled-runs", params={"rule_id": "later", "status": "pending"})
    cancelled = api.post(f"/api/v1/scheduled-runs/{scheduled['id']}/cancel", json={"by": "ann"})
    again = api.post(f"/api/v1/scheduled-runs/{scheduled['id']}/cancel", json={})

    # Then it was listed, the first cancel took, the second says why not, and no run exists
    assert [item["id"] for item in listed.json()] == [scheduled["id"]]
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["reason"].startswith("cancelled by ")
    assert again.status_code == 409
    assert "is cancelled, so it can no longer be cancelled" in again.json()["detail"]
    with cluster.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(RunRow)) == 0


def test_the_hourly_prune_job_deletes_settled_scheduled_runs_past_retention_and_keeps_pending(
    database_url: str,
) -> None:
    from ade_tasks.housekeeping import Housekeeping, standard_jobs
    from ade_tasks.settings import Settings

    # Given scheduled runs due 40 days ago (fired, cancelled, still pending) and a fired one due
    # yesterday, on PostgreSQL
    engine = create_db_engine(database_url)
    session_factory = create_session_factory(engine)
    now = utcnow()
    old, recent = now - once_db.RETENTION - timedelta(days=5), now - timedelta(days=1)
    rows = {"old-fired": ("fired", old), "old-cancelled": ("cancelled", old),
            "old-pending": ("pending", old), "recent-fired": ("fired", recent)}  # fmt: skip
    with session_factory.begin() as session:
        for key, (status, run_at) in rows.items():
            session.add(
                ScheduledRunRow(id=key, key=f"manual:{key}", rule_id="r", trigger_index=None,
                                run_at=run_at, inputs={}, requested_by="t", status=status)
            )  # fmt: skip
    # When a beat's housekeeping runs its standard jobs (the prune slot of this hour is won)
    jobs = standard_jobs(session_factory, InMemorySender(), Settings(database_url=database_url))
    results = Housekeeping(session_factory, "beat-prune", jobs).tick(now)
    # Then the settled ones past the retention are gone; the pending and the recent one stay
    with session_factory() as session:
        left = set(session.scalars(select(ScheduledRunRow.id)))
    engine.dispose()
    assert results["prune"] == {
        "occurrences": 0,
        "schedule_shards": 0,
        "ingress_events": 0,
        "scheduled_runs": 2,
    }
    assert left == {"old-pending", "recent-fired"}
