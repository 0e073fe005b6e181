"""The run path's statements sent by the driver (`ade_tasks.db.direct`) on PostgreSQL: they
write and read back what the session path does, refuse what it refuses, and a connection that
died under them is retried on a fresh one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import event, insert, text
from sqlalchemy.exc import DBAPIError

from ade_tasks.clock import utcnow
from ade_tasks.db import partitions as partitions_db
from ade_tasks.db import run_ids
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import usage as usage_db
from ade_tasks.db.direct import Direct, direct_statements, durable_writes
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.retry import retrying
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus, StepStatus
from ade_tasks.testing import InMemorySender
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


# --- statements aimed at the run's month (`ade_tasks.db.run_ids`) -------------------------------


def observed(sessions: SessionFactory) -> list[str]:
    """The SQL of every statement the engine sends from now on (a listener puts the direct
    path on SQLAlchemy's, which tells listeners, with the same SQL)."""
    seen: list[str] = []
    event.listen(sessions.kw["bind"], "before_cursor_execute",
                 lambda _c, _cur, sql, *_: seen.append(sql))  # fmt: skip
    return seen


def queued_run(sessions: SessionFactory, run_id: str, queued_at: datetime) -> None:
    values = {
        "id": run_id, "rule_id": "direct", "rule_version": 1, "trigger_type": "manual",
        "trigger_summary": "", "trigger": {}, "idempotency_key": f"key-{run_id}",
        "status": "queued", "billing_code": "team-d", "usage": {}, "queue": "ade.builtin",
        "attempt": 0, "buffered": False, "send_count": 1, "sent_at": queued_at,
        "queued_at": queued_at, "finished_at": None, "error": None,
    }  # fmt: skip
    with sessions.begin() as session:
        session.execute(insert(runs_db.RUNS).values(**values))


def partition_holding(sessions: SessionFactory, run_id: str) -> str:
    with sessions() as session:
        sql = "SELECT tableoid::regclass::text FROM runs WHERE id = :id"
        return str(session.execute(text(sql), {"id": run_id}).scalar_one())


def claim_and_finish(sessions: SessionFactory, run_id: str) -> tuple[bool, bool]:
    direct = direct_of(sessions)
    claimed = runs_db.claim_run(direct, run_id, "w1", utcnow() + timedelta(minutes=1))
    charge = usage_db.Charge("team-d", usage_db.day_of(utcnow()), 2.0)
    finished = runs_db.finish_run(direct, run_id, "w1", RunStatus.SUCCEEDED, charge=charge)
    return claimed is not None, finished


def test_a_dispatched_run_is_claimed_and_finished_on_its_month_partition_only(
    sessions: SessionFactory,
) -> None:
    # Given a dispatched run: its id names the month of its queued_at
    run_id = new_run(sessions)
    with sessions() as session:
        queued_at = runs_db.get_run(session, run_id).queued_at
    month = partitions_db.partition_name("runs", partitions_db.month_start(queued_at))
    assert run_ids.queued_month(run_id) == partitions_db.month_start(queued_at)
    assert partition_holding(sessions, run_id) == month
    seen = observed(sessions)

    # When a worker claims it and records its outcome
    assert claim_and_finish(sessions, run_id) == (True, True)

    # Then each went to that month's partition, once
    claims = [sql for sql in seen if sql.lstrip().startswith("UPDATE")]
    outcomes = [sql for sql in seen if sql.startswith("WITH")]
    assert len(claims) == 1 and claims[0].startswith(f"UPDATE {month} AS runs SET")
    assert len(outcomes) == 1 and f"finished AS (UPDATE {month} AS runs SET" in outcomes[0]
    with sessions() as session:
        assert runs_db.get_run(session, run_id).status == RunStatus.SUCCEEDED


def test_a_run_held_in_default_is_found_in_the_parent_and_its_month_is_remembered(
    sessions: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run of a month no partition covers (a clock far off): it lives in DEFAULT
    monkeypatch.setattr(runs_db, "_MISSING_PARTITIONS", set())
    stamped = utcnow() - timedelta(days=800)
    run_id = run_ids.new_run_id(stamped)
    queued_run(sessions, run_id, stamped)
    assert partition_holding(sessions, run_id) == "runs_default"

    # When it is claimed and finished by the driver
    outcome = claim_and_finish(sessions, run_id)

    # Then both took effect through the parent table, charged once, and this process
    # remembers that month has no partition
    assert outcome == (True, True)
    with sessions() as session:
        assert runs_db.get_run(session, run_id).status == RunStatus.SUCCEEDED
        assert usage_db.usage_on(session, usage_db.day_of(utcnow()), "team-d").run_seconds == 2.0
    month = partitions_db.partition_name("runs", partitions_db.month_start(stamped))
    assert runs_db._MISSING_PARTITIONS == {month}


@pytest.mark.parametrize("id_kind", ["another month", "uuid4"])
def test_a_run_whose_id_does_not_name_its_month_is_still_claimed_and_finished(
    sessions: SessionFactory, id_kind: str
) -> None:
    # Given a run queued now whose id names next month (made by hand), or an id from before
    # ids named months
    now = utcnow()
    if id_kind == "uuid4":
        run_id = str(uuid.uuid4())
    else:
        run_id = run_ids.new_run_id(partitions_db.next_month(partitions_db.month_start(now)))
    queued_run(sessions, run_id, now)
    seen = observed(sessions)

    # When it is claimed and finished
    outcome = claim_and_finish(sessions, run_id)

    # Then both took effect, through the parent table in the end, and charged once
    assert outcome == (True, True)
    updates = [sql for sql in seen if sql.startswith(("UPDATE", "WITH"))]
    assert updates[-1].startswith("WITH") and "finished AS (UPDATE runs SET" in updates[-1]
    assert len(updates) == (2 if id_kind == "uuid4" else 4)  # a miss, then the parent
    with sessions() as session:
        assert runs_db.get_run(session, run_id).status == RunStatus.SUCCEEDED
        assert usage_db.usage_on(session, usage_db.day_of(now), "team-d").run_seconds == 2.0
