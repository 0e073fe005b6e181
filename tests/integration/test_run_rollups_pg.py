"""The run rollup on PostgreSQL: the same counts and durations either side of the watermark, and
two processes advancing at once never add the same runs twice."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import text

from ade_tasks.clock import utcnow
from ade_tasks.db import run_rollups
from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.metrics import cluster_facts
from ade_tasks.db.schema import RunRow


def _run(rule: str, status: str, finished_ago: float | None, ran_for: float = 2.0) -> RunRow:
    now = utcnow()
    finished = now - timedelta(seconds=finished_ago) if finished_ago is not None else None
    run_id = str(uuid.uuid4())
    return RunRow(
        id=run_id,
        rule_id=rule,
        rule_version=1,
        trigger_type="manual",
        trigger={},
        idempotency_key=run_id,
        status=status,
        billing_code=f"auto:{rule}",
        usage={},
        queue="ade.builtin",
        queued_at=now - timedelta(hours=1),
        started_at=finished - timedelta(seconds=ran_for) if finished else None,
        finished_at=finished,
    )


def test_rollup_on_postgresql_counts_each_run_once(database_url: str) -> None:
    engine = create_db_engine(database_url)
    sessions = create_session_factory(engine)
    with sessions.begin() as session:
        session.add_all(
            [_run("r", "succeeded", 600 + n, ran_for=n) for n in range(50)]
            + [_run("r", "failed", 10), _run("r", "running", None)]
        )
    with sessions() as session:
        before = cluster_facts(session)
    assert before.runs == {("r", "succeeded"): 50, ("r", "failed"): 1, ("r", "running"): 1}

    holder = sessions()
    holder.begin()
    assert run_rollups.advance(holder, utcnow()) == 50  # the failed run is within LAG
    with sessions.begin() as other:
        # the first advance has not committed: the other one skips instead of waiting
        assert run_rollups.advance(other, utcnow()) is None
    holder.commit()
    holder.close()
    with sessions.begin() as other:
        assert run_rollups.advance(other, utcnow()) == 0  # nothing new behind now - LAG
    with sessions() as session:
        after = cluster_facts(session)
    assert after.runs == before.runs
    assert after.durations["r"] == before.durations["r"]
    assert after.durations["r"].count == 51
    engine.dispose()


def test_rollup_advances_over_more_rules_than_a_statement_has_parameters(
    database_url: str,
) -> None:
    # The first advance after an upgrade passes the whole history at once: with 70,000 rules
    # one IN list of their ids passed PostgreSQL's 65,535 bind parameters and the rollup
    # (and with it /metrics) never moved again.
    engine = create_db_engine(database_url)
    sessions = create_session_factory(engine)
    rules = 70_000
    with sessions.begin() as session:
        session.execute(
            text(
                "INSERT INTO runs (id, rule_id, rule_version, trigger_type, trigger_summary, "
                "trigger, idempotency_key, status, billing_code, usage, queue, attempt, "
                "buffered, send_count, queued_at, started_at, finished_at) "
                "SELECT md5(n::text)::uuid::text, 'rule-' || n, 1, 'cron', '', '{}', "
                "'k' || n, 'succeeded', 'b', '{}', 'ade.builtin', 1, false, 1, "
                "now() - interval '2 hours', now() - interval '2 hours', "
                "now() - interval '1 hour' FROM generate_series(1, :rules) AS n"
            ),
            {"rules": rules},
        )
    with sessions.begin() as session:
        assert run_rollups.advance(session, utcnow()) == rules
    with sessions.begin() as session:
        stored = session.execute(text("SELECT count(*), sum(runs) FROM run_rollups")).one()
    assert tuple(stored) == (rules, rules)
    engine.dispose()
