"""Durable agent threads in the database (`ade_tasks.db.threads`) and an agent step's opening
and closing of its thread (`ade_workers.agents.thread_session`), on a migrated SQLite file."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ade_tasks.agents.prompt import RenderedPrompt
from ade_tasks.agents.threads import MAX_ENTRIES, Turn
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import threads as threads_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.rules.steps import AgentSessionStep
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.templating import TemplateContext
from ade_tasks.testing import InMemorySender
from ade_workers.agents.thread_session import close_thread, open_thread
from tests.unit.conftest import add_rule

STEP = AgentSessionStep(
    type="agent-session",
    id="fix",
    provider="openai",
    model="m",
    prompt="p",
    thread="pr-{{trigger.inputs.pr}}",
)
RULE = """
id: r
triggers: [{type: manual}]
execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}
"""
TEMPLATE = TemplateContext({"inputs": {"pr": "7"}}, {}, {}, datetime.now(UTC))


def new_entry(run_id: str, key: str = "pr-7", project: str = "default") -> threads_db.NewEntry:
    return threads_db.NewEntry(
        project=project,
        key=key,
        run_id=run_id,
        step_id="fix",
        rule_id="r",
        status="completed",
        summary="done",
        tainted=False,
        turns=[Turn("user", f"task of {run_id}")],
    )


def test_a_thread_is_scoped_to_its_project_and_read_up_to_a_snapshot(
    session_factory: SessionFactory,
) -> None:
    with session_factory.begin() as session:
        first = threads_db.append_entry(session, new_entry("a"))
        threads_db.append_entry(session, new_entry("other-project", project="web"))
        threads_db.append_entry(session, new_entry("b"))

    with session_factory() as session:
        everything = threads_db.entries_of(session, "default", "pr-7")
        snapshot = threads_db.entries_of(session, "default", "pr-7", up_to=first)
        runs = threads_db.runs_of(session, "web", "pr-7")

    assert [e.run_id for e in everything] == ["a", "b"]
    assert [e.run_id for e in snapshot] == ["a"]
    assert everything[0].turns == (Turn("user", "task of a"),)
    assert [r.run_id for r in runs] == ["other-project"]


def test_a_thread_keeps_its_newest_entries(session_factory: SessionFactory) -> None:
    with session_factory.begin() as session:
        for n in range(MAX_ENTRIES + 5):
            threads_db.append_entry(session, new_entry(f"run-{n}"))

    with session_factory() as session:
        kept = threads_db.entries_of(session, "default", "pr-7")

    assert len(kept) == MAX_ENTRIES
    assert kept[0].run_id == "run-5" and kept[-1].run_id == f"run-{MAX_ENTRIES + 4}"


def _run(session_factory: SessionFactory) -> str:
    return dispatch(
        session_factory, InMemorySender(), "r", TriggerEvent("manual", "m", {"inputs": {}}, None)
    ).run.id


def _close(session_factory: SessionFactory, thread: object, run_id: str, status: str) -> None:
    close_thread(
        session_factory,
        thread,  # type: ignore[arg-type]
        run_id=run_id,
        step_id="fix",
        rule_id="r",
        prompt=RenderedPrompt(f"task of {run_id}"),
        status=status,
        summary="ok",
    )


def test_two_sessions_of_one_key_both_keep_theirs_and_each_saw_the_thread_as_it_started(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "r", RULE)
    first, second, third = (_run(session_factory) for _ in range(3))

    one = open_thread(session_factory, STEP, first, "default", TEMPLATE)
    two = open_thread(session_factory, STEP, second, "default", TEMPLATE)
    _close(session_factory, two, second, "completed")
    _close(session_factory, one, first, "failed")
    one_again = open_thread(session_factory, STEP, first, "default", TEMPLATE)  # a resume
    three = open_thread(session_factory, STEP, third, "default", TEMPLATE)

    assert one is not None and two is not None and three is not None and one_again is not None
    assert one.continuation.empty and two.continuation.empty
    assert one_again.continuation.empty  # a resumed attempt is given what the first was
    assert three.continuation.runs == (second, first)  # in the order they ended
    with session_factory() as session:
        runs = threads_db.runs_of(session, "default", "pr-7")
    assert [(r.run_id, r.status) for r in runs] == [(second, "completed"), (first, "failed")]


def test_a_session_that_waits_stores_nothing_and_one_that_ends_stores_once(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "r", RULE)
    run_id = _run(session_factory)
    thread = open_thread(session_factory, STEP, run_id, "default", TEMPLATE)
    with session_factory.begin() as session:
        turn = {"text": "working", "tool_calls": [], "step": "fix"}
        run_events_db.append_event(session, run_id, "agent.model_turn", turn)

    _close(session_factory, thread, run_id, "waiting")
    with session_factory() as session:
        waiting = threads_db.entries_of(session, "default", "pr-7")
    _close(session_factory, thread, run_id, "completed")
    _close(session_factory, thread, run_id, "completed")  # the step run again after its end

    with session_factory() as session:
        (stored,) = threads_db.entries_of(session, "default", "pr-7")
    assert waiting == []
    assert [t.text for t in stored.turns] == [f"task of {run_id}", "working"]
