"""A run's outcome on PostgreSQL: one statement records the outcome, the last step and the
run-seconds charged to the billing code, and charges nothing for a run that was not ours."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from ade_tasks.clock import utcnow
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import usage as usage_db
from ade_tasks.db.engine import SessionFactory, autocommit, create_db_engine, create_session_factory
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus, StepStatus
from ade_tasks.testing import InMemorySender
from tests.conftest import write_rule
from tests.integration.conftest import Cluster

RULE = """
id: billed
triggers: [{type: manual}]
billing_code: team-a
execution: {kind: built-in, actions: [{id: only, type: run-command, command: "true"}]}
"""
DAY = "2026-11-30"


@pytest.fixture
def sessions(cluster: Cluster, tmp_path: Path) -> Iterator[SessionFactory]:
    write_rule(tmp_path / "rules", "billed.yaml", RULE)
    cluster.sync_rules(tmp_path / "rules")
    engine = create_db_engine(cluster.settings.database_url)
    yield autocommit(create_session_factory(engine))
    engine.dispose()


def claimed_run(sessions: SessionFactory, worker: str) -> str:
    run_id = dispatch(sessions, InMemorySender(), "billed", TriggerEvent.manual(by="t")).run.id
    with sessions.begin() as session:
        assert runs_db.claim_run(session, run_id, worker, utcnow() + timedelta(minutes=1))
    return run_id


def seconds_of(sessions: SessionFactory, code: str) -> float:
    with sessions() as session:
        return usage_db.usage_on(session, DAY, code).run_seconds


@pytest.mark.parametrize("with_step", [False, True])
def test_the_outcome_charges_its_run_seconds_once_and_only_when_the_run_was_ours(
    sessions: SessionFactory, with_step: bool
) -> None:
    run_id = claimed_run(sessions, "w1")
    step = run_steps_db.StepRecord(
        run_id, 0, "only", "run-command", utcnow(), StepStatus.SUCCEEDED, utcnow(), 0, "ok"
    )
    charge = usage_db.Charge("team-a", DAY, 1.25)

    with sessions.begin() as session:
        assert runs_db.finish_run(
            session, run_id, "w1", RunStatus.SUCCEEDED, None, step if with_step else None,
            charge=charge,
        )  # fmt: skip
        # A second worker's late outcome for the same run: not its run, nothing charged.
        assert not runs_db.finish_run(
            session, run_id, "w2", RunStatus.FAILED, "late", charge=charge
        )
    other = claimed_run(sessions, "w1")
    with sessions.begin() as session:
        assert runs_db.finish_run(session, other, "w1", RunStatus.SUCCEEDED, charge=charge)

    assert seconds_of(sessions, "team-a") == 2.5  # the two runs that were ours add up
    with sessions() as session:
        assert runs_db.get_run(session, run_id).status == RunStatus.SUCCEEDED
        steps = run_steps_db.list_steps(session, run_id)
    assert [(s.step_id, s.status) for s in steps] == ([("only", "succeeded")] if with_step else [])
