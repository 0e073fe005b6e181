"""The run path's statements sent by the driver (`ade_tasks.db.direct`) on PostgreSQL: they
write and read back what the session path does, refuse what it refuses, and a connection that
died under them is retried on a fresh one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from ade_tasks.clock import utcnow
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import usage as usage_db
from ade_tasks.db.direct import Direct, direct_statements, durable_writes
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.retry import retrying
from ade_tasks.runs.dispatch import InMemorySender, TriggerEvent, dispatch
from ade_tasks.states import RunStatus, StepStatus
from tests.conftest import write_rule
from tests.integration.conftest import Cluster, terminate_backends

RULE = """
id: direct
triggers: [{type: manual}]
billing_code: team-d
execution: {kind: built-in, actions: [{id: only, type: run-command, command: "true"}]}
"""
BUDGETED = """
id: budgeted
triggers: [{type: manual}]
billing_code: team-b
guardrails: {budget: {run_seconds_per_day: 3600}}
execution: {kind: built-in, actions: [{id: only, type: run-command, command: "true"}]}
"""


@pytest.fixture
def sessions(cluster: Cluster, tmp_path: Path) -> Iterator[SessionFactory]:
    write_rule(tmp_path / "rules", "direct.yaml", RULE)
    cluster.sync_rules(tmp_path / "rules")
    engine = create_db_engine(cluster.settings.database_url)
    yield create_session_factory(engine)
    engine.dispose()


def direct_of(sessions: SessionFactory) -> Direct:
    direct = direct_statements(sessions)
    assert direct is not None
    return direct


def new_run(sessions: SessionFactory) -> str:
    trigger = TriggerEvent.manual({"who": "t"}, by="t")
    return dispatch(sessions, InMemorySender(), "direct", trigger).run.id


def test_a_claim_and_an_outcome_sent_directly_read_back_as_written(
    sessions: SessionFactory,
) -> None:
    direct = direct_of(sessions)
    assert durable_writes(sessions) is direct
    run_id = new_run(sessions)
    lease = utcnow() + timedelta(minutes=1)

    claimed = runs_db.claim_run(direct, run_id, "w1", lease)
    with sessions.begin() as session:  # the same worker's repeated claim, through a session
        again = runs_db.claim_run(session, run_id, "w1", lease)

    assert claimed is not None and again is not None
    assert claimed.attempt == 1 and again.attempt == 2
    assert {**vars(claimed), "attempt": 2} == vars(again)  # trigger JSON decoded alike
    assert runs_db.claim_run(direct, run_id, "w2", lease) is None  # not w2's to take

    finished_at = utcnow()
    step = run_steps_db.StepRecord(
        run_id, 0, "only", "run-command", finished_at, StepStatus.SUCCEEDED, finished_at, 0,
        "ok\n", {"duration_sec": 0.001},
    )  # fmt: skip
    verdict = runs_db.RunVerdict("completed-clean", 0.75, [{"finding": "none"}])
    charge = usage_db.Charge("team-d", usage_db.day_of(finished_at), 1.5)
    assert not runs_db.finish_run(direct, run_id, "w2", RunStatus.FAILED, "late", charge=charge)
    assert runs_db.finish_run(
        direct, run_id, "w1", RunStatus.SUCCEEDED, None, step, verdict, charge
    )

    with sessions() as session:
        row = runs_db.get_run(session, run_id)
        (recorded,) = run_steps_db.list_steps(session, run_id)
        used = usage_db.usage_on(session, charge.day, "team-d").run_seconds
    assert (row.status, row.queue_status, row.confidence) == ("succeeded", "completed-clean", 0.75)
    assert row.findings == [{"finding": "none"}]
    assert row.finished_at is not None and row.finished_at.tzinfo is not None
    assert (recorded.status, recorded.output, recorded.result) == (
        "succeeded", "ok\n", {"duration_sec": 0.001}
    )  # fmt: skip
    assert used == 1.5  # charged once: the late outcome of w2 charged nothing


def test_a_naive_timestamp_is_refused_before_anything_is_sent(sessions: SessionFactory) -> None:
    run_id = new_run(sessions)
    naive = datetime.now() + timedelta(hours=1)

    with pytest.raises(ValueError, match="naive datetime"):
        runs_db.claim_run(direct_of(sessions), run_id, "w1", naive)

    with sessions() as session:
        assert runs_db.get_run(session, run_id).status == RunStatus.QUEUED


def test_a_statement_whose_connection_died_is_retried_on_a_fresh_one(
    cluster: Cluster, sessions: SessionFactory
) -> None:
    direct = direct_of(sessions)
    run_id = new_run(sessions)
    lease = datetime.now(UTC) + timedelta(minutes=1)
    engine = sessions.kw["bind"]
    held = [engine.raw_connection() for _ in range(3)]  # the pool keeps three connections
    for connection in held:
        connection.close()

    terminate_backends(cluster)  # every one of them dies
    with pytest.raises(DBAPIError) as lost:
        direct.execute(text("SELECT 1"), {})
    assert lost.value.connection_invalidated
    assert isinstance(lost.value.orig, psycopg.OperationalError)  # the driver's own error

    terminate_backends(cluster)
    claimed = retrying(direct, lambda d: runs_db.claim_run(d, run_id, "w1", lease), attempts=2)

    assert claimed is not None and claimed.id == run_id
    with sessions() as session:
        assert runs_db.get_run(session, run_id).worker == "w1"


def test_a_dispatch_whose_guardrail_reads_holds_one_connection_at_a_time(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Given a rule with a budget (read before its run's INSERT), fired before by this process,
    # and a pool of one connection that no one waits long for
    write_rule(tmp_path / "rules", "budgeted.yaml", BUDGETED)
    cluster.sync_rules(tmp_path / "rules")
    engine = create_db_engine(
        cluster.settings.database_url, pool_size=1, max_overflow=0, pool_timeout=2
    )
    sessions = create_session_factory(engine)
    try:
        first = dispatch(sessions, InMemorySender(), "budgeted", TriggerEvent.manual(by="t"))
        # When it is fired again (the remembered read: the budget's SELECT, then the INSERT)
        again = dispatch(sessions, InMemorySender(), "budgeted", TriggerEvent.manual(by="t"))
    finally:
        engine.dispose()
    # Then both runs are stored: the INSERT did not wait for the connection the read held
    assert first.created and again.created and first.run.id != again.run.id
    with cluster.session_factory() as session:
        assert runs_db.get_run(session, again.run.id).status == RunStatus.QUEUED
