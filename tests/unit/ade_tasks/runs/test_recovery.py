"""The lease sweep: a run whose worker died is queued again and re-sent (a bounded number of
times), then fails as "worker lost"."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ade_tasks.clock import utcnow
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_recovery as run_recovery_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.recovery import recover
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from tests.unit.conftest import add_rule

AGENT_RULE = """
id: agent
triggers: [{type: manual}]
execution:
  kind: agent-session
  provider: openai
  model: gpt-4o-mini
  prompt: "Review the project."
"""
CHAIN_RULE = """
id: chain
triggers: [{type: manual}]
execution:
  kind: built-in
  actions: [{type: run-command, command: "true"}]
"""
MINUTE = timedelta(minutes=1)


@pytest.fixture
def rules(session_factory: SessionFactory, rules_dir: Path) -> None:
    add_rule(session_factory, rules_dir, "agent", AGENT_RULE)
    add_rule(session_factory, rules_dir, "chain", CHAIN_RULE)


def start(session_factory: SessionFactory, sender: InMemorySender, rule_id: str) -> str:
    """A run of the rule, sent, then claimed by a worker whose lease has already expired."""
    run_id = dispatch(session_factory, sender, rule_id, TriggerEvent.manual()).run.id
    sender.sent.clear()
    lose_worker(session_factory, run_id)
    return run_id


def lose_worker(session_factory: SessionFactory, run_id: str, worker: str = "w1") -> None:
    """Claim the run and announce its step under a lease that has already run out."""
    with session_factory.begin() as session:
        assert runs_db.claim_run(session, run_id, worker, utcnow() - timedelta(seconds=1))
        step = run_steps_db.StepRecord(run_id, 0, "session", "agent-session", utcnow())
        run_steps_db.announce_step(session, step)


def record_turn(session_factory: SessionFactory, run_id: str) -> None:
    with session_factory.begin() as session:
        turn = {"text": "", "tool_calls": [], "usage": {}, "stop_reason": "tool_use"}
        run_events_db.append_event(session, run_id, "agent.model_turn", turn)


def kinds(session_factory: SessionFactory, run_id: str) -> list[str]:
    with session_factory() as session:
        return [kind for kind, _ in run_events_db.events_of(session, run_id, "run.")]


def test_a_session_with_a_recorded_turn_is_queued_again_and_sent_at_once(
    session_factory: SessionFactory, sender: InMemorySender, rules: None
) -> None:
    run_id = start(session_factory, sender, "agent")
    record_turn(session_factory, run_id)

    report = recover(session_factory, sender, requeue_after=MINUTE)

    assert (report.resumed, report.failed, report.resent) == ([run_id], [], [])
    assert sender.sent == [(run_id, "ade.agent", "agent")]
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        assert (run.status, run.worker, run.lease_expires_at, run.error) == (
            RunStatus.QUEUED, None, None, None
        )  # fmt: skip
        # The session step stays running; the resumed attempt records its outcome over it.
        assert [s.status for s in run_steps_db.list_steps(session, run_id)] == ["running"]
        # The dead worker's late writes are refused; the next worker claims it as attempt 2.
        assert not runs_db.finish_run(session, run_id, "w1", RunStatus.SUCCEEDED)
        assert not runs_db.renew_lease(session, run_id, "w1", utcnow() + MINUTE)
    assert kinds(session_factory, run_id) == [run_recovery_db.RESUMED_EVENT]
    with session_factory.begin() as session:
        claimed = runs_db.claim_run(session, run_id, "w2", utcnow() + MINUTE)
        assert claimed is not None and claimed.attempt == 2
    # It was marked sent: the same sweep's next pass does not send it again.
    assert recover(session_factory, sender, requeue_after=MINUTE).resent == []


def test_a_session_that_keeps_losing_its_worker_fails_after_the_resume_cap(
    session_factory: SessionFactory, sender: InMemorySender, rules: None
) -> None:
    run_id = start(session_factory, sender, "agent")
    record_turn(session_factory, run_id)
    for resume in range(run_recovery_db.MAX_WORKER_LOST_RESUMES):
        assert recover(session_factory, sender, requeue_after=MINUTE).resumed == [run_id]
        lose_worker(session_factory, run_id, worker=f"w{resume + 2}")

    report = recover(session_factory, sender, requeue_after=MINUTE)

    assert (report.resumed, report.failed) == ([], [run_id])
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        assert run.status == RunStatus.FAILED and run.attempt == 3
        assert run.error is not None and run.error.startswith("worker lost")
        assert f"resumed {run_recovery_db.MAX_WORKER_LOST_RESUMES} times" in run.error
        assert [s.status for s in run_steps_db.list_steps(session, run_id)] == ["failed"]
    assert kinds(session_factory, run_id) == [run_recovery_db.RESUMED_EVENT] * 2 + [
        "run.worker_lost"
    ]


@pytest.mark.parametrize("rule_id", ["chain", "agent"])
def test_a_run_whose_worker_died_is_queued_again_with_its_step_left_to_decide(
    session_factory: SessionFactory, sender: InMemorySender, rules: None, rule_id: str
) -> None:
    # A chain, or a session that died before its first model turn was recorded.
    run_id = start(session_factory, sender, rule_id)

    report = recover(session_factory, sender, requeue_after=MINUTE)

    assert (report.failed, report.resumed) == ([], [run_id])
    assert [sent[0] for sent in sender.sent] == [run_id]
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        assert (run.status, run.error) == (RunStatus.QUEUED, None)
        lost = run_recovery_db.interruption_of(session, run_id)
        assert lost.pending and lost.reruns == {}
    assert kinds(session_factory, run_id) == [run_recovery_db.RESUMED_EVENT]


def test_a_resumed_session_the_broker_refuses_stays_queued_for_the_next_sweep(
    session_factory: SessionFactory, sender: InMemorySender, rules: None
) -> None:
    run_id = start(session_factory, sender, "agent")
    record_turn(session_factory, run_id)
    sender.down = True

    report = recover(session_factory, sender, requeue_after=MINUTE)

    assert (report.resumed, report.unsent) == ([], [run_id])
    with session_factory() as session:
        assert runs_db.get_run(session, run_id).status == RunStatus.QUEUED
    sender.down = False
    assert recover(session_factory, sender, requeue_after=timedelta(0)).resent == [run_id]
    assert sender.sent == [(run_id, "ade.agent", "agent")]
