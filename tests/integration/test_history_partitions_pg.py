"""The partitioned history on PostgreSQL (migration 0020, `ade_tasks.db.partitions`): the
migration moves existing rows into monthly partitions and keeps idempotency keys unique, the
partition job makes the coming months and drops expired ones with everything that referred to
their runs, a failed creation is retried and shows in the metrics, a cursor into dropped history
answers 410 (and only an empty page pays for that check), and a scrape during the migration
answers."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, insert, text, update
from sqlalchemy.orm import Session

from ade_api.http.app import create_app
from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from ade_tasks.db import partitions as partitions_db
from ade_tasks.db import run_views
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import alembic_config, upgrade
from ade_tasks.db.runs import RUNS, insert_run_once, insert_runs_once
from ade_tasks.db.schema import ApprovalRow, RunEventRow, RunStepRow
from ade_tasks.housekeeping import (
    PARTITION_JOB_EVERY,
    Housekeeping,
    Job,
    maintain_partitions,
    standard_jobs,
)
from ade_tasks.settings import Settings
from ade_tasks.testing import InMemorySender

MONTH = partitions_db.month_start


def months_back(count: int, now: datetime | None = None) -> datetime:
    """The first instant of the month `count` months before `now`'s."""
    start = MONTH(now or utcnow())
    for _ in range(count):
        start = MONTH(start - timedelta(days=1))
    return start


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_db_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def sessions(engine: Engine) -> SessionFactory:
    return create_session_factory(engine)


def run_values(queued_at: datetime, **changes: Any) -> dict[str, Any]:
    run_id = str(uuid.uuid4())
    values = {
        "id": run_id, "rule_id": "r", "rule_version": 1, "trigger_type": "manual",
        "trigger_summary": "", "trigger": {}, "idempotency_key": f"key-{run_id}",
        "status": "succeeded", "billing_code": "auto:r", "usage": {}, "queue": "ade.builtin",
        "attempt": 1, "buffered": False, "send_count": 1, "sent_at": None,
        "queued_at": queued_at, "finished_at": queued_at + timedelta(minutes=1), "error": None,
    }  # fmt: skip
    return {**values, **changes}


def add_run(session: Session, queued_at: datetime, *, children: bool = True,
            **changes: Any) -> str:  # fmt: skip
    """A run with a step, an event and an approval (when `children`)."""
    values = run_values(queued_at, **changes)
    session.execute(insert(RUNS).values(**values))
    if children:
        at = queued_at + timedelta(seconds=5)
        session.add(RunStepRow(run_id=values["id"], index=0, step_id="s", action_type="x",
                               status="succeeded", started_at=at, result={}))  # fmt: skip
        session.add(RunEventRow(run_id=values["id"], at=at, kind="log.line", data={}))
        # Core, naming only the columns every revision under test has (later ones add more).
        session.execute(insert(ApprovalRow.__table__).values(
            run_id=values["id"], step_index=0, reason="r", status="approved", requested_at=at))  # fmt: skip
    session.flush()
    return str(values["id"])


def count(session: Session, sql: str, **params: Any) -> int:
    return int(session.execute(text(sql), params).scalar_one())


def where_rows_live(session: Session, table: str) -> dict[str, int]:
    rows = session.execute(
        text(f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1")
    )
    return {name: int(number) for name, number in rows}


def test_the_migration_moves_rows_into_months_and_keeps_keys_unique(
    engine: Engine, sessions: SessionFactory
) -> None:
    # Given a database before the partitions, holding runs of three months with children
    command.downgrade(alembic_config(engine), "0019")
    with sessions.begin() as session:
        assert not partitions_db.is_partitioned(session)
        old, recent, now = months_back(3), months_back(1), utcnow()
        ids = [add_run(session, at + timedelta(days=2)) for at in (old, recent)]
        ids.append(add_run(session, now - timedelta(seconds=30)))
        key_of_old = session.execute(
            text("SELECT idempotency_key FROM runs WHERE id = :id"), {"id": ids[0]}
        ).scalar_one()
    # When it is migrated
    upgrade(engine)
    # Then every row is in its month's partition, the keys are in run_keys
    with sessions.begin() as session:
        assert partitions_db.is_partitioned(session)
        names = [partitions_db.partition_name("runs", m) for m in (old, recent, MONTH(now))]
        assert where_rows_live(session, "runs") == dict.fromkeys(names, 1)
        assert sum(where_rows_live(session, "run_steps").values()) == 3
        assert "run_events_default" not in where_rows_live(session, "run_events")
        assert count(session, "SELECT count(*) FROM run_keys") == 3
        # and a second run with an old key is skipped, as before; a new key is inserted
        assert not insert_run_once(session, run_values(now, status="queued",
                                                       idempotency_key=key_of_old))  # fmt: skip
        assert insert_run_once(session, run_values(now, status="queued"))
        assert count(session, "SELECT count(*) FROM runs WHERE idempotency_key = :k",
                     k=key_of_old) == 1  # fmt: skip
        # and deleting a run deletes its children, as the foreign keys' cascade did
        session.execute(text("DELETE FROM runs WHERE id = :id"), {"id": ids[1]})
        for table in ("run_steps", "run_events", "approvals", "run_keys"):
            assert count(session, f"SELECT count(*) FROM {table} WHERE run_id = :id",
                         id=ids[1]) == 0, table  # fmt: skip
    # When it is migrated back
    command.downgrade(alembic_config(engine), "0019")
    # Then the rows are all there, unpartitioned, with the unique key and the foreign keys
    with sessions.begin() as session:
        assert not partitions_db.is_partitioned(session)
        assert count(session, "SELECT count(*) FROM runs") == 3
        assert count(session, "SELECT count(*) FROM approvals") == 2
        assert count(session, "SELECT count(*) FROM pg_constraint WHERE conname IN "
                     "('uq_runs_idempotency_key', 'fk_run_events_run_id_runs')") == 2  # fmt: skip
    upgrade(engine)


def test_the_partition_job_drops_expired_months_with_everything_of_their_runs(
    sessions: SessionFactory,
) -> None:
    # Given runs of four months ago (one ran past its month's end, with a late event), a run
    # of three months ago still waiting, and one of two months ago
    now = utcnow()
    with sessions.begin() as session:
        partitions_db.create_months(session, months_back(4, now), now)
        boundary = months_back(3, now)
        spans = add_run(session, boundary - timedelta(minutes=10),
                        finished_at=boundary + timedelta(minutes=5))  # fmt: skip
        session.add(RunEventRow(run_id=spans, at=boundary + timedelta(minutes=4),
                                kind="log.line", data={}))  # fmt: skip
        plain = add_run(session, months_back(4, now) + timedelta(days=3))
        waiting = add_run(session, boundary + timedelta(days=3), status="waiting",
                          finished_at=None)  # fmt: skip
        later = add_run(session, months_back(2, now) + timedelta(days=3))
        current = add_run(session, now - timedelta(minutes=1))
    retention = now.day + 5  # the cutoff falls in last month: three months lie wholly before
    # When the job runs
    result = maintain_partitions(sessions, now, retention)
    # Then only the oldest month went (the waiting run holds the next one, and all after it)
    assert result["dropped"] == [
        partitions_db.partition_name(table, months_back(4, now))
        for table in ("runs", "run_steps", "run_events")
    ], result
    with sessions.begin() as session:
        assert sorted(session.execute(text("SELECT id FROM runs")).scalars()) == sorted(
            [waiting, later, current]
        )
        for table in ("run_steps", "run_events", "approvals", "run_keys"):
            left = count(session, f"SELECT count(*) FROM {table} WHERE run_id IN (:a, :b)",
                         a=spans, b=plain)  # fmt: skip
            assert left == 0, f"{table} keeps rows of dropped runs"
    # When the waiting run ends and the job runs again
    with sessions.begin() as session:
        session.execute(update(RUNS).where(RUNS.c.id == waiting).values(status="succeeded",
                                                                      finished_at=now))  # fmt: skip
    result = maintain_partitions(sessions, now + PARTITION_JOB_EVERY, retention)
    # Then the two months before the cutoff go too; this month's run and its children stay
    assert len(result["dropped"]) == 6, result  # type: ignore[arg-type]
    with sessions.begin() as session:
        assert [row[0] for row in session.execute(text("SELECT id FROM runs"))] == [current]
        for table in ("run_steps", "run_events", "approvals", "run_keys"):
            assert count(session, f"SELECT count(*) FROM {table}") == 1, table


def scrape(client: TestClient) -> dict[str, float]:
    answer = client.get("/metrics")
    assert answer.status_code == 200, answer.text
    found = {}
    for line in answer.text.splitlines():
        if line.startswith(("ade_history_", "ade_database_up")):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


@pytest.fixture
def api(database_url: str, sessions: SessionFactory) -> Iterator[TestClient]:
    with sessions.begin() as session:
        _, token = tokens_db.create_token(session, "partitions", Role.VIEWER, "tests")
    app = create_app(Settings(database_url=database_url), session_factory=sessions)
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def test_a_failed_partition_creation_is_retried_and_shows_before_the_month_ends(
    engine: Engine,
    sessions: SessionFactory,
    api: TestClient,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given only the current month's partitions, and a lock the job cannot get
    now = utcnow()
    with sessions.begin() as session:
        for table in partitions_db.PARTITIONED:
            for partition in partitions_db.partitions(session, table):
                if partition.start > now:
                    session.execute(text(f"DROP TABLE {partition.name}"))
    monkeypatch.setattr(partitions_db, "LOCK_TIMEOUT_MS", 200)
    job = Job("partitions", PARTITION_JOB_EVERY, lambda at: maintain_partitions(sessions, at, None))
    housekeeping = Housekeeping(sessions, "beat-1", [job])
    with engine.connect() as blocker:
        blocker.execute(text("SELECT count(*) FROM runs_default"))  # holds it until rollback
        # When the job's tick cannot take its lock
        with caplog.at_level(logging.ERROR, logger="ade_tasks.housekeeping"):
            first = housekeeping.tick(now)
        blocker.rollback()
    # Then it failed, said so in the log, and the metric shows the time left in this month
    assert first["partitions"] == {"create_error": "OperationalError"}
    assert any("partitions were not created" in r.getMessage() for r in caplog.records)
    left = (partitions_db.next_month(MONTH(now)) - utcnow()).total_seconds()
    metrics = scrape(api)
    assert metrics['ade_history_partition_ahead_seconds{table="runs"}'] == pytest.approx(
        left, abs=60
    )
    # When the job's next slot comes
    second = housekeeping.tick(now + PARTITION_JOB_EVERY)
    # Then it made the three coming months of each table, and the metric says so
    assert len(second["partitions"]["created"]) == 9, second  # type: ignore[index]
    metrics = scrape(api)
    assert metrics['ade_history_partition_ahead_seconds{table="runs"}'] > left + 85 * 86400


def test_rows_no_month_covers_land_in_the_default_partition_and_are_reported(
    sessions: SessionFactory, api: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a run stamped years back (a clock far off): no month's partition covers it
    with sessions.begin() as session:
        stamped = utcnow() - timedelta(days=800)
        add_run(session, stamped, children=False)
    # When the metrics are scraped and the job runs
    metrics = scrape(api)
    with caplog.at_level(logging.WARNING, logger="ade_tasks.housekeeping"):
        maintain_partitions(sessions, utcnow(), None)
    # Then both report it
    assert metrics['ade_history_default_partition_rows{table="runs"}'] == 1
    assert metrics['ade_history_default_partition_rows{table="run_events"}'] == 0
    assert any("DEFAULT partitions" in r.getMessage() for r in caplog.records)
    # When that month's partition is made, the row moves into it
    with sessions.begin() as session:
        made = partitions_db.create_months(session, stamped, stamped)
    assert len(made) == 3
    assert scrape(api)['ade_history_default_partition_rows{table="runs"}'] == 0
    with sessions.begin() as session:
        assert where_rows_live(session, "runs") == {
            partitions_db.partition_name("runs", MONTH(stamped)): 1
        }


def test_a_cursor_into_dropped_history_answers_410(
    sessions: SessionFactory, api: TestClient
) -> None:
    # Given two runs four months ago and one now, and a cursor between the old two
    now = utcnow()
    with sessions.begin() as session:
        partitions_db.create_months(session, months_back(4, now), now)
        for day in (3, 4):
            add_run(session, months_back(4, now) + timedelta(days=day), children=False)
        add_run(session, now - timedelta(minutes=1), children=False)
    until = months_back(3, now).isoformat()
    page = api.get("/api/v1/runs", params={"until": until, "limit": "1"}).json()
    cursor = page["next_cursor"]
    assert cursor and api.get("/api/v1/runs", params={"cursor": cursor}).status_code == 200
    # When the old month expires and is dropped
    maintain_partitions(sessions, now, retention_days=now.day + 5)
    # Then the cursor answers 410 with a problem saying what to do; a first page still answers
    gone = api.get("/api/v1/runs", params={"cursor": cursor})
    assert gone.status_code == 410, gone.text
    assert gone.headers["content-type"].startswith("application/problem+json")
    assert gone.json()["title"] == "Gone"
    assert "without a cursor" in gone.json()["detail"]
    fresh = api.get("/api/v1/runs")
    assert fresh.status_code == 200 and len(fresh.json()["items"]) == 1


def test_a_cursor_page_with_runs_reads_no_catalog_and_an_empty_one_checks_for_dropped_months(
    engine: Engine, sessions: SessionFactory
) -> None:
    # Given three runs this month, and the first page of one
    now = utcnow()
    with sessions.begin() as session:
        for minutes in (1, 2, 3):
            add_run(session, now - timedelta(minutes=minutes), children=False)
    with sessions() as session:
        _, cursor = run_views.list_runs(session, run_views.RunFilter(), limit=1)
    assert cursor is not None
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        statements.append(sql)

    event.listen(engine, "before_cursor_execute", record)
    try:
        # When the next page is read with that cursor
        with sessions() as session:
            rows, after = run_views.list_runs(
                session, run_views.RunFilter(), limit=1, cursor=cursor
            )
        # Then it is the page query alone: no catalog read, no probe of the DEFAULT partition
        assert len(rows) == 1 and after is not None
        assert len(statements) == 1 and "pg_class" not in statements[0]
        # And a page past the last run, which comes back empty, does check for dropped months
        with sessions() as session:
            rest, _ = run_views.list_runs(session, run_views.RunFilter(), limit=5, cursor=after)
            statements.clear()
            past_the_last = run_views.encode_cursor(rest[-1])
            empty, none = run_views.list_runs(session, run_views.RunFilter(), cursor=past_the_last)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert empty == [] and none is None
    assert any("runs_default" in sql for sql in statements)


def test_a_scrape_during_the_partition_migration_answers(
    engine: Engine, sessions: SessionFactory, api: TestClient
) -> None:
    # Given a database before the partitions, and the migration stuck holding its locks on
    # the runs (a transaction reading approvals keeps it from dropping their foreign key)
    command.downgrade(alembic_config(engine), "0019")
    with sessions.begin() as session:
        add_run(session, utcnow() - timedelta(minutes=1))
    errors: list[BaseException] = []
    with engine.connect() as blocker:
        blocker.execute(text("SELECT count(*) FROM approvals"))

        def migrate() -> None:
            try:
                upgrade(engine)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        migration = threading.Thread(target=migrate)
        migration.start()
        deadline = utcnow() + timedelta(seconds=30)
        while not _waits_for_a_lock(blocker) and utcnow() < deadline:
            time.sleep(0.05)
        assert _waits_for_a_lock(blocker), "the migration never reached the lock"
        # When the metrics are scraped mid-migration
        during = scrape(api)
        blocker.rollback()
    migration.join(timeout=60)
    # Then the scrape answered with the database down, and after it with the partitions
    assert not errors and not migration.is_alive()
    assert during["ade_database_up"] == 0
    after = scrape(api)
    assert after["ade_database_up"] == 1
    assert after['ade_history_partition_ahead_seconds{table="runs"}'] > 85 * 86400


def _waits_for_a_lock(connection: Any) -> bool:
    """Is some other session of this database waiting for a lock (the migration)?"""
    with Session(connection.engine) as session:
        return bool(
            session.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        )


def test_racing_inserts_of_one_key_make_one_run_on_the_partitioned_table(
    sessions: SessionFactory,
) -> None:
    # Given eight dispatches of the same key, released together
    now = utcnow()
    barrier = threading.Barrier(8)
    won: list[bool] = []

    def dispatch() -> None:
        values = run_values(now, status="queued", idempotency_key="the-one-key")
        barrier.wait(timeout=10)
        with sessions.begin() as session:
            won.append(insert_run_once(session, values))

    # When they insert at once
    threads = [threading.Thread(target=dispatch) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # Then one inserted, and one run and one key exist
    assert sorted(won) == [False] * 7 + [True]
    with sessions.begin() as session:
        assert (
            count(session, "SELECT count(*) FROM runs WHERE idempotency_key = 'the-one-key'") == 1
        )
        assert count(session, "SELECT count(*) FROM run_keys") == 1
        # and a batch with that key, a new key twice and a fresh one inserts only the new two
        batch = [run_values(now, status="queued", idempotency_key=key)
                 for key in ("the-one-key", "twice", "twice", "fresh")]  # fmt: skip
        inserted = insert_runs_once(session, batch)
        assert inserted == {batch[1]["id"], batch[3]["id"]}
        assert count(session, "SELECT count(*) FROM runs") == 3


def test_the_hourly_prune_leaves_a_partitioned_history_to_the_partition_job(
    sessions: SessionFactory,
) -> None:
    # Given a run that finished 40 days ago, with a retention of 30 days
    now = utcnow()
    with sessions.begin() as session:
        partitions_db.create_months(session, now - timedelta(days=40), now)
        kept = add_run(session, now - timedelta(days=40))
    settings = Settings(database_url="postgresql://unused/", run_retention_days=30)
    (prune,) = [job for job in standard_jobs(sessions, InMemorySender(), settings)
                if job.name == "prune"]  # fmt: skip
    # When the prune job runs
    pruned = prune.run(now)
    # Then it deleted no run row by row: its month goes whole, when all of it has expired
    assert "runs" not in pruned  # type: ignore[operator]
    with sessions.begin() as session:
        assert count(session, "SELECT count(*) FROM runs WHERE id = :id", id=kept) == 1
