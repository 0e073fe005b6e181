"""The one table of run status moves (`ade_tasks.states`): what each move may leave and reach,
its refusals, the statuses a run may be created in, and the cancel that every entry point shares (an operator's, an `ade-action
runs.cancel` step's (tests/unit/ade_workers/actions/test_ade_action_steps.py) and overlap `cancel-other`'s)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ade_tasks.clock import utcnow
from ade_tasks.db import run_cancels as run_cancels_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.run_steps import StepRecord
from ade_tasks.db.schema import ApprovalRow
from ade_tasks.errors import ConflictError, IllegalTransitionError
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import (
    CANCEL,
    FAIL_AFTER_CLEANUP,
    FINAL_STATUSES,
    FINISH,
    INITIAL_STATUSES,
    RUN_TRANSITIONS,
    ApprovalStatus,
    Move,
    RunStatus,
    StepStatus,
)
from ade_tasks.testing import InMemorySender
from tests.unit.conftest import add_rule

S = RunStatus


def test_the_table_says_where_each_status_may_go() -> None:
    assert RUN_TRANSITIONS == {
        S.QUEUED: {S.RUNNING, S.CANCELLED},
        S.RUNNING: {S.WAITING, S.QUEUED, S.SUCCEEDED, S.FAILED, S.TIMED_OUT, S.CANCELLED,
                    S.SKIPPED},
        S.WAITING: {S.QUEUED, S.CANCELLED},
        S.SUCCEEDED: {S.FAILED},
        S.FAILED: set(), S.CANCELLED: set(), S.TIMED_OUT: set(), S.SKIPPED: set(),
    }  # fmt: skip
    assert FINAL_STATUSES == {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMED_OUT, S.SKIPPED}


@pytest.mark.parametrize(
    ("move", "was", "to"),
    [
        (FINISH, S.QUEUED, S.SUCCEEDED),  # a run finishes only from running
        (FINISH, S.RUNNING, S.QUEUED),  # and not back into the queue
        (CANCEL, S.SUCCEEDED, S.CANCELLED),
        (FAIL_AFTER_CLEANUP, S.CANCELLED, S.FAILED),  # a cancelled run keeps its outcome
    ],
)
def test_an_illegal_move_is_refused_with_what_the_move_allows(
    move: Move, was: RunStatus, to: RunStatus
) -> None:
    with pytest.raises(IllegalTransitionError, match=f"from {was} to {to}: .* moves a run from"):
        move.check(was, to)


def _new_run(key: str, status: RunStatus) -> dict[str, Any]:
    """The values dispatch inserts a run of rule `busy` with."""
    now = utcnow()
    return {
        "id": f"run-{key}", "rule_id": "busy", "rule_version": 1, "trigger_type": "manual",
        "trigger_summary": "", "trigger": {}, "idempotency_key": key, "status": status,
        "billing_code": "auto:busy", "usage": {}, "queue": "ade.builtin", "attempt": 0,
        "buffered": False, "send_count": 1, "sent_at": now, "queued_at": now,
        "finished_at": None, "error": None,
    }  # fmt: skip


def test_a_run_is_created_only_queued_or_skipped() -> None:
    assert INITIAL_STATUSES == {S.QUEUED, S.SKIPPED}


@pytest.mark.parametrize("status", [s for s in RunStatus if s not in (S.QUEUED, S.SKIPPED)])
def test_inserting_a_run_in_a_later_status_is_refused_with_the_initial_ones(
    session_factory: SessionFactory, rules_dir: Path, status: RunStatus
) -> None:
    _rule(session_factory, rules_dir)
    with (
        session_factory.begin() as session,
        pytest.raises(
            IllegalTransitionError,
            match=f"run run-one cannot be created {status}: .*queued or skipped",
        ),
    ):
        runs_db.insert_run_once(session, _new_run("one", status))
    with session_factory() as session:
        assert runs_db.runs_by_keys(session, ["one"]) == {}


def test_a_batch_with_one_run_in_a_later_status_inserts_none_of_them(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    _rule(session_factory, rules_dir)
    batch = [_new_run("a", S.QUEUED), _new_run("b", S.RUNNING), _new_run("c", S.SKIPPED)]
    with (
        session_factory.begin() as session,
        pytest.raises(IllegalTransitionError, match="run run-b cannot be created running"),
    ):
        runs_db.insert_runs_once(session, batch)
    with session_factory() as session:
        assert runs_db.runs_by_keys(session, ["a", "b", "c"]) == {}
    with session_factory.begin() as session:  # the initial statuses alone are inserted
        assert runs_db.insert_runs_once(session, [batch[0], batch[2]]) == {"run-a", "run-c"}


def _rule(session_factory: SessionFactory, rules_dir: Path, guardrails: str = "{}") -> None:
    add_rule(session_factory, rules_dir, "busy", (
        "id: busy\ntriggers: [{type: manual}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n"
        f"guardrails: {guardrails}\n"
    ))  # fmt: skip


def _running_with_a_step_and_an_approval(session_factory: SessionFactory) -> str:
    run_id = dispatch(session_factory, InMemorySender(), "busy", TriggerEvent.manual()).run.id
    with session_factory.begin() as session:
        assert runs_db.claim_run(session, run_id, "w", utcnow() + timedelta(minutes=1))
        run_steps_db.announce_step(
            session, StepRecord(run_id, 0, "one", "run-command", utcnow(), StepStatus.RUNNING)
        )
        session.add(ApprovalRow(run_id=run_id, step_index=1, reason="gate", status="pending"))
    return run_id


def _settled(session_factory: SessionFactory, run_id: str) -> tuple[str, str, str, list[str]]:
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        (step,) = run_steps_db.list_steps(session, run_id)
        approval = session.query(ApprovalRow).filter_by(run_id=run_id).one()
        events = [kind for kind, _ in run_events_db.events_of(session, run_id, "run.cancelled")]
        return run.status, step.status, approval.status, events


def test_finishing_a_run_into_the_queue_is_refused_before_any_write(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    _rule(session_factory, rules_dir)
    run_id = _running_with_a_step_and_an_approval(session_factory)
    with session_factory.begin() as session, pytest.raises(IllegalTransitionError):
        runs_db.finish_run(session, run_id, "w", RunStatus.QUEUED)
    with session_factory() as session:
        assert runs_db.get_run(session, run_id).status == RunStatus.RUNNING


def test_an_operators_cancel_settles_steps_approvals_and_the_transcript(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    _rule(session_factory, rules_dir)
    run_id = _running_with_a_step_and_an_approval(session_factory)
    with session_factory.begin() as session:
        _, was = run_cancels_db.cancel_run(session, run_id, "alice", "wrong branch")
    assert was == RunStatus.RUNNING
    settled = (RunStatus.CANCELLED, StepStatus.FAILED, ApprovalStatus.CANCELLED, ["run.cancelled"])
    assert _settled(session_factory, run_id) == settled
    # a second cancel is refused as the illegal move it is, still a ConflictError (409)
    with session_factory.begin() as session, pytest.raises(ConflictError, match="already finished"):
        run_cancels_db.cancel_run(session, run_id, "alice")


def test_cancel_other_settles_the_run_it_cancels_as_an_operators_cancel_does(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    _rule(session_factory, rules_dir, "{overlap: cancel-other, max_concurrent: 1}")
    old = _running_with_a_step_and_an_approval(session_factory)
    dispatch(session_factory, InMemorySender(), "busy", TriggerEvent.manual())
    settled = (RunStatus.CANCELLED, StepStatus.FAILED, ApprovalStatus.CANCELLED, ["run.cancelled"])
    assert _settled(session_factory, old) == settled
    with session_factory() as session:
        (event,) = run_events_db.events_of(session, old, "run.cancelled")
        error = runs_db.get_run(session, old).error
    assert event[1] == {"by": "a newer trigger", "note": "the rule's overlap policy is "
                        "cancel-other", "was": "running"}  # fmt: skip
    assert error == "cancelled by a newer trigger: the rule's overlap policy is cancel-other"
