"""Agent-session runs parked on an operator: a tool call the policy asks about (approve, accept for
the session, cancel, time out) and an `ask_user` question whose answer reaches the model.

An OpenAI-compatible scripted server on 127.0.0.1 answers in the recorded Chat Completions
format; SQLite, real tools on a real git worktree.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ade_tasks.clock import utcnow
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import ApprovalRow
from ade_tasks.errors import ConflictError, InvalidInputError
from ade_tasks.runs.approvals import answer_input, decide_run, expire_inputs
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.states import Answer, RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.fake_llm import ScriptedModelServer
from tests.integration.agent_run_support import (
    agent_rule,
    config,
    llm,
    manual_with_body,
    rules_dir,
    run_of,
    session_factory,
    text,
    tool_calls,
)

__all__ = ["config", "llm", "rules_dir", "session_factory"]  # the fixtures this module uses


def test_ask_parks_the_run_until_an_operator_approves_and_the_call_runs_once(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, llm: ScriptedModelServer
) -> None:
    agent_rule(rules_dir, session_factory, "policy: {fallback: ask}\n  permission_mode: edit")
    llm.script(
        tool_calls(("call_1", "write_file", {"path": "notes.txt", "content": "hello"})),
        text("wrote the notes"),
    )
    run_id = dispatch(session_factory, InMemorySender(), "reviewer", manual_with_body("x")).run.id

    first = execute_run(session_factory, config, run_id, "w1")
    notes = config.settings.project_root("default") / "notes.txt"
    assert first == RunStatus.WAITING and not notes.exists()
    decide_run(session_factory, InMemorySender(), run_id, approve=True, by="alice")
    second = execute_run(session_factory, config, run_id, "w2")

    run, events = run_of(session_factory, run_id)
    assert second == RunStatus.SUCCEEDED, run.error
    assert notes.read_text() == "hello"
    assert [kind for kind, _ in events].count("agent.model_turn") == 2  # no model call repeated
    assert len(llm.requests) == 2


def _pending_input(session_factory: SessionFactory, run_id: str) -> ApprovalRow:
    with session_factory() as session:
        (row,) = [a for a in approvals_db.approvals_of(session, run_id) if a.status == "pending"]
        session.expunge(row)
    return row


def test_accept_for_session_lets_later_calls_of_that_tool_run_without_asking(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, llm: ScriptedModelServer
) -> None:
    agent_rule(rules_dir, session_factory, "policy: {fallback: ask}\n  permission_mode: edit")
    llm.script(
        tool_calls(("call_1", "write_file", {"path": "a.txt", "content": "a"})),
        tool_calls(("call_2", "write_file", {"path": "b.txt", "content": "b"})),
        text("wrote both"),
    )
    run_id = dispatch(session_factory, InMemorySender(), "reviewer", manual_with_body("x")).run.id
    assert execute_run(session_factory, config, run_id, "w1") == RunStatus.WAITING
    pending = _pending_input(session_factory, run_id)
    assert (pending.tool, pending.arguments) == ("write_file", {"path": "a.txt", "content": "a"})

    sender = InMemorySender()
    answer_input(session_factory, sender, pending.id, Answer.ACCEPT_FOR_SESSION, by="alice")
    status = execute_run(session_factory, config, run_id, "w2")

    run, _ = run_of(session_factory, run_id)
    root = config.settings.project_root("default")
    assert status == RunStatus.SUCCEEDED, run.error
    assert (root / "a.txt").read_text() == "a" and (root / "b.txt").read_text() == "b"
    assert [s[0] for s in sender.sent] == [run_id]  # the answer re-sent the run
    with session_factory() as session:
        answers = [(a.tool, a.answer) for a in approvals_db.approvals_of(session, run_id)]
    assert answers == [("write_file", "accept_for_session")]  # call_2 never asked


def test_cancel_ends_the_run_and_a_second_answer_is_not_pending(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, llm: ScriptedModelServer
) -> None:
    agent_rule(rules_dir, session_factory, "policy: {fallback: ask}\n  permission_mode: edit")
    llm.script(tool_calls(("call_1", "write_file", {"path": "a.txt", "content": "a"})))
    run_id = dispatch(session_factory, InMemorySender(), "reviewer", manual_with_body("x")).run.id
    execute_run(session_factory, config, run_id, "w1")
    pending = _pending_input(session_factory, run_id)

    _, run = answer_input(
        session_factory, InMemorySender(), pending.id, Answer.CANCEL, by="bob", note="not now"
    )

    assert run.status == RunStatus.CANCELLED and run.error == "cancelled by bob: not now"
    with pytest.raises(ConflictError, match=f"input {pending.id} is not pending.*cancel by bob"):
        answer_input(session_factory, InMemorySender(), pending.id, Answer.ACCEPT, by="carol")
    assert not (config.settings.project_root("default") / "a.txt").exists()


def test_an_unanswered_call_is_declined_when_its_approval_timeout_passes(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, llm: ScriptedModelServer
) -> None:
    agent_rule(
        rules_dir, session_factory,
        "policy: {fallback: ask}\n  permission_mode: edit\n  approval_timeout_min: 30",
    )  # fmt: skip
    llm.script(
        tool_calls(("call_1", "write_file", {"path": "a.txt", "content": "a"})),
        text("understood, not writing"),
    )
    run_id = dispatch(session_factory, InMemorySender(), "reviewer", manual_with_body("x")).run.id
    execute_run(session_factory, config, run_id, "w1")
    sender = InMemorySender()

    assert expire_inputs(session_factory, sender, utcnow() + timedelta(minutes=29)) == []
    assert expire_inputs(session_factory, sender, utcnow() + timedelta(minutes=31)) == [run_id]
    status = execute_run(session_factory, config, run_id, "w2")

    run, events = run_of(session_factory, run_id)
    assert status == RunStatus.SUCCEEDED, run.error
    assert not (config.settings.project_root("default") / "a.txt").exists()
    (result,) = [data for kind, data in events if kind == "agent.tool_result"]
    assert result["is_error"] and "declined by an operator" in result["content"]
    with session_factory() as session:
        (decided,) = approvals_db.approvals_of(session, run_id)
    assert (decided.answer, decided.decided_by) == ("decline", "approval-timeout")


def test_ask_user_parks_a_question_and_the_operators_text_reaches_the_model(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, llm: ScriptedModelServer
) -> None:
    agent_rule(rules_dir, session_factory)
    llm.script(
        tool_calls(("call_q", "ask_user", {"question": "Which module matters most?"})),
        text("Looked at src/app.py as asked."),
    )
    run_id = dispatch(session_factory, InMemorySender(), "reviewer", manual_with_body("x")).run.id

    first = execute_run(session_factory, config, run_id, "w1")

    assert first == RunStatus.WAITING
    pending = _pending_input(session_factory, run_id)
    assert (pending.kind, pending.tool) == ("question", "ask_user")
    assert "the agent asks: Which module matters most?" in pending.reason
    with pytest.raises(InvalidInputError, match="answer it with text"):
        answer_input(session_factory, InMemorySender(), pending.id, Answer.ACCEPT, by="alice")
    answer_input(
        session_factory, InMemorySender(), pending.id, Answer.ACCEPT, by="alice",
        note="src/app.py",
    )  # fmt: skip
    second = execute_run(session_factory, config, run_id, "w2")

    run, _ = run_of(session_factory, run_id)
    assert second == RunStatus.SUCCEEDED, run.error
    follow_up = llm.requests[1].json["messages"]
    assert follow_up[-1]["role"] == "tool" and follow_up[-1]["tool_call_id"] == "call_q"
    assert follow_up[-1]["content"] == "The operator answered: src/app.py"
