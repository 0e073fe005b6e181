"""`require_human` with a quorum: the counting of approvals by token name, the requester kept
out, and a gate on SQLite that needs two approvals (the real API with real tokens is in
tests/integration/test_auth.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ade_tasks.access.actors import actor_name, token_of
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import PolicyViolationError
from ade_tasks.rules.approval_policy import ApprovalPolicy, count_approval, requester_of
from ade_tasks.rules.guardrails import Guardrails, HumanApproval
from ade_tasks.runs.approvals import decide_run
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.unit.ade_tasks.test_guardrails import run_of
from tests.unit.conftest import add_rule

AT = datetime(2026, 12, 7, 10, tzinfo=UTC)


def test_require_human_true_is_one_approval_by_anyone_but_the_requester() -> None:
    assert Guardrails(require_human=True).human_approval() == HumanApproval(
        approvals=1, requester_may_approve=False
    )
    assert Guardrails().human_approval() is None
    quorum = Guardrails.model_validate({"require_human": {"approvals": 2}}).human_approval()
    assert quorum == HumanApproval(approvals=2, requester_may_approve=False)


def test_approvals_are_counted_by_token_name_and_the_requester_is_refused() -> None:
    policy = ApprovalPolicy(needed=2, excluded="oncall")

    with pytest.raises(PolicyViolationError, match=r"requested by token 'oncall'.*another token"):
        count_approval([], policy, by="oncall (kim)", note=None, at=AT, run_id="r1")
    first = count_approval([], policy, by="alice", note="ok", at=AT, run_id="r1")
    assert (first.counted, first.released, len(first.votes)) == (True, False, 1)
    again = count_approval(first.votes, policy, by="alice (al)", note=None, at=AT, run_id="r1")
    assert (again.counted, again.released, len(again.votes)) == (False, False, 1)
    second = count_approval(again.votes, policy, by="bob", note=None, at=AT, run_id="r1")
    assert second.released
    assert [vote["token"] for vote in second.votes] == ["alice", "bob"]


def test_the_requester_is_the_token_of_a_manual_runs_requested_by() -> None:
    assert (
        actor_name("oncall", "kim") == "oncall (kim)" and actor_name("oncall", "oncall") == "oncall"
    )
    assert token_of("oncall (kim)") == "oncall" and token_of("ci") == "ci"
    assert requester_of(TriggerEvent.manual(by="oncall (kim)").payload) == "oncall"
    assert requester_of({"author": "octocat"}) is None  # a webhook's login is not a token


def test_a_gate_needing_two_approvals_waits_for_the_second_and_records_each(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    add_rule(session_factory, rules_dir, "r", """id: r
triggers: [{type: manual}]
guardrails: {require_human: {approvals: 2}}
execution:
  kind: built-in
  actions: [{id: deploy, type: run-command, command: "touch deployed"}]
""")  # fmt: skip
    event = TriggerEvent.manual(by="oncall")
    run_id = dispatch(session_factory, InMemorySender(), "r", event).run.id
    assert execute_run(session_factory, config, run_id, "w1") == RunStatus.WAITING

    with pytest.raises(PolicyViolationError):
        decide_run(session_factory, InMemorySender(), run_id, approve=True, by="oncall")
    sender = InMemorySender()
    for by in ("alice", "alice (again)"):
        assert decide_run(session_factory, sender, run_id, approve=True, by=by).status == "waiting"
    assert sender.sent == []
    decide_run(session_factory, sender, run_id, approve=True, by="bob", note="ship it")

    assert sender.sent == [(run_id, "ade.builtin", "r")]
    with session_factory() as session:
        (gate,) = approvals_db.approvals_of(session, run_id)
        events = run_events_db.events_of(session, run_id, approvals_db.ANSWERED_EVENT)
    assert (gate.status, gate.decided_by, gate.approvals_needed) == ("approved", "alice, bob", 2)
    assert "2 people other than oncall" in gate.reason
    assert [(e["by"], e["approvals"], e["needed"]) for _, e in events] == [
        ("alice", 1, 2),
        ("bob", 2, 2),
    ]
    assert execute_run(session_factory, config, run_id, "w2") == RunStatus.SUCCEEDED
    assert (project / "deployed").exists()


def test_one_decline_ends_a_gate_that_needs_several_approvals(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    add_rule(session_factory, rules_dir, "r", """id: r
triggers: [{type: manual}]
guardrails: {require_human: {approvals: 3, requester_may_approve: true}}
execution:
  kind: built-in
  actions: [{id: deploy, type: run-command, command: "true"}]
""")  # fmt: skip
    run_id = dispatch(
        session_factory, InMemorySender(), "r", TriggerEvent.manual(by="oncall")
    ).run.id
    execute_run(session_factory, config, run_id, "w1")

    decide_run(session_factory, InMemorySender(), run_id, approve=True, by="oncall")  # allowed
    decide_run(session_factory, InMemorySender(), run_id, approve=False, by="carol", note="no")

    run = run_of(session_factory, run_id)
    assert (run.status, run.error) == (RunStatus.CANCELLED, "rejected by carol: no")
