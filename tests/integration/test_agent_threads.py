"""Durable agent threads through the real runner: a later run whose `thread:` key renders the same
continues the earlier runs' conversation. SQLite, a real git project, and scripted model servers
on 127.0.0.1 (OpenAI Chat Completions for the HTTP provider, Anthropic Messages for the real
claude CLI); the assertions read what the model was sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from ade_api.dev_model import ScriptedAnthropic
from ade_api.dev_model import Turn as ClaudeTurn
from ade_api.http.app import create_app
from ade_tasks.access.roles import Role
from ade_tasks.agents.threads import CONTINUATION_CHARS, Turn
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import threads as threads_db
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import ModelPrice, ProviderSettings, Settings
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.celery.app import create_celery_app
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.fake_llm import ScriptedModelServer
from tests.git_project import make_git_project, make_runner_config, migrated_sqlite
from tests.integration.agent_run_support import run_of, text, tool_calls
from tests.real_clis import real_cli
from tests.unit.conftest import add_rule

FIXED = "I fixed the off-by-one in src/app.py."


@pytest.fixture
def session_factory(tmp_path: Path) -> SessionFactory:
    return migrated_sqlite(tmp_path)


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    return tmp_path / "rules"


@pytest.fixture
def llm() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunnerConfig:
    return make_runner_config(make_git_project(tmp_path, monkeypatch), tmp_path)


@pytest.fixture
def config(project: RunnerConfig, llm: ScriptedModelServer) -> RunnerConfig:
    provider = ProviderSettings(base_url=llm.url, api_key=SecretStr("sk-test-key"))
    settings = project.settings.model_copy(update={"providers": {"openai": provider}})
    return RunnerConfig(settings, project.executors, project.base_env)


def thread_rule(
    session_factory: SessionFactory, rules_dir: Path, provider: str = "openai", model: str = "m"
) -> None:
    add_rule(session_factory, rules_dir, "fixer", f"""
id: fixer
triggers: [{{type: manual}}]
execution:
  kind: agent-session
  provider: {provider}
  model: {model}
  permission_mode: plan
  tool_palette: [repo]
  thread: "pr-{{{{trigger.inputs.pr}}}}"
  prompt: "{{{{trigger.inputs.ask}}}}"
""")  # fmt: skip


def run(
    session_factory: SessionFactory, config: RunnerConfig, ask: str, pr: str = "7"
) -> tuple[str, RunStatus]:
    trigger = TriggerEvent("manual", "manual", {"inputs": {"pr": pr, "ask": ask}}, None)
    run_id = dispatch(session_factory, InMemorySender(), "fixer", trigger).run.id
    return run_id, execute_run(session_factory, config, run_id, "w1")


def test_a_later_run_with_the_same_key_continues_the_earlier_conversation_over_http(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, llm: ScriptedModelServer
) -> None:
    thread_rule(session_factory, rules_dir)
    llm.script(
        tool_calls(("call_1", "read_file", {"path": "src/app.py"})),
        text(FIXED),
        text("Addressed the review."),
        text("Another pull request."),
    )
    first, first_status = run(session_factory, config, "Fix the failing test.")

    second, second_status = run(session_factory, config, "Address the review comment.")
    _, other_status = run(session_factory, config, "Fix PR 8.", pr="8")

    assert first_status == second_status == other_status == RunStatus.SUCCEEDED
    messages = llm.requests[2].json["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert "Fix the failing test." in messages[1]["content"]
    earlier = messages[2]["content"]
    assert 'call read_file {"path": "src/app.py"}' in earlier and "print('hi')" in earlier
    assert earlier.endswith(FIXED)
    assert messages[3]["content"] == "Address the review comment."
    assert len(llm.requests[3].json["messages"]) == 2  # another key: a thread of its own
    _, events = run_of(session_factory, second)
    (opened,) = [data for kind, data in events if kind == "agent.thread"]
    assert opened["key"] == "pr-7" and opened["continues"] == [first]
    with session_factory() as session:
        runs = threads_db.runs_of(session, "default", "pr-7")
    assert [(r.run_id, r.status) for r in runs] == [(first, "completed"), (second, "completed")]
    detail, page = shown(session_factory, second)
    (thread,) = detail["threads"]
    assert thread["key"] == "pr-7" and thread["continued"] == [first]
    assert [r["run_id"] for r in thread["runs"]] == [first, second]
    assert "Agent threads" in page and "pr-7" in page and f"/ui/runs/{first}" in page


def shown(session_factory: SessionFactory, run_id: str) -> tuple[dict[str, Any], str]:
    """The run as the run API gives it, and its run page."""
    settings = Settings()
    celery = create_celery_app(settings, session_factory=session_factory)
    app = create_app(
        settings, session_factory=session_factory, celery=celery, sender=InMemorySender()
    )
    with session_factory.begin() as session:
        _, token = tokens_db.create_token(session, "viewer", Role.VIEWER, "tests")
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
        detail = client.get(f"/api/v1/runs/{run_id}")
        page = client.get(f"/ui/runs/{run_id}")
    assert detail.status_code == page.status_code == 200, detail.text
    return detail.json(), page.text


@pytest.mark.parametrize(
    ("pr", "says"),
    [("  ", "the thread key rendered empty"), ("9" * 300, "over the limit of 200")],
    ids=["empty", "too-long"],
)
def test_a_key_that_renders_empty_or_too_long_fails_the_run_before_the_model_is_asked(
    session_factory: SessionFactory,
    rules_dir: Path,
    config: RunnerConfig,
    llm: ScriptedModelServer,
    pr: str,
    says: str,
) -> None:
    add_rule(session_factory, rules_dir, "fixer", """
id: fixer
triggers: [{type: manual}]
execution:
  kind: agent-session
  provider: openai
  model: m
  thread: "{{trigger.inputs.pr}}"
  prompt: "go"
""")  # fmt: skip

    run_id, status = run(session_factory, config, "go", pr=pr)

    found, _ = run_of(session_factory, run_id)
    assert status == RunStatus.FAILED
    assert says in (found.error or "") and "step 'session' thread" in (found.error or "")
    assert llm.requests == []


def test_a_thread_larger_than_the_bound_is_summarised_and_the_request_stays_bounded(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, llm: ScriptedModelServer
) -> None:
    thread_rule(session_factory, rules_dir)
    with session_factory.begin() as session:
        for n in range(40):  # 40 sessions of ~40,000 characters each
            turns = [Turn("user", f"task {n}")] + [Turn("assistant", "x" * 2_000)] * 20
            entry = threads_db.NewEntry(
                "default", "pr-7", f"old-{n}", "session", "fixer", "completed", f"did {n}: " + "s" * 200,
                False, turns,
            )  # fmt: skip
            threads_db.append_entry(session, entry)
    llm.script(text("ok"))

    _, status = run(session_factory, config, "Go on.")

    assert status == RunStatus.SUCCEEDED
    messages = llm.requests[0].json["messages"]
    given = sum(len(m["content"]) for m in messages[1:-1])
    assert given <= CONTINUATION_CHARS
    digest = messages[1]["content"]  # of older sessions, newest kept, then the cut is said
    assert "did 38" in digest and "did 0:" not in digest and "older sessions omitted" in digest
    assert messages[-1]["content"] == "Go on."


def test_a_session_killed_midway_stores_its_whole_conversation_once_its_resumed_run_ends(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, llm: ScriptedModelServer
) -> None:
    thread_rule(session_factory, rules_dir)
    trigger = TriggerEvent("manual", "manual", {"inputs": {"pr": "7", "ask": "Fix it."}}, None)
    run_id = dispatch(session_factory, InMemorySender(), "fixer", trigger).run.id
    # What a worker SIGKILLed after the first model turn leaves: the thread it opened (empty
    # then) and the turn; another session of the key ended while it was down.
    with session_factory.begin() as session:
        killed = {"step": "session", "key": "pr-7", "project": "default", "up_to": 0}
        run_events_db.append_event(session, run_id, "agent.thread", killed)
        turn = {"text": "Looking at the failure first.", "tool_calls": [], "step": "session"}
        turn["tool_calls"] = [{"id": "call_1", "name": "read_file", "arguments": {"path": "x"}}]
        run_events_db.append_event(session, run_id, "agent.model_turn", turn)
        other = threads_db.NewEntry(
            "default", "pr-7", "meanwhile", "session", "fixer", "completed", "", False,
            [Turn("user", "a session that ended meanwhile")],
        )  # fmt: skip
        threads_db.append_entry(session, other)
        at_kill = [e.run_id for e in threads_db.entries_of(session, "default", "pr-7")]
    llm.script(text(FIXED))

    status = execute_run(session_factory, config, run_id, "w2")

    assert status == RunStatus.SUCCEEDED
    assert at_kill == ["meanwhile"]  # the killed attempt stored nothing
    sent = json.dumps(llm.requests[0].json["messages"])
    assert "ended meanwhile" not in sent  # given what it was given when it started
    with session_factory() as session:
        (stored,) = [
            e for e in threads_db.entries_of(session, "default", "pr-7") if e.run_id == run_id
        ]
    texts = [t.text for t in stored.turns]
    assert texts[:2] == ["Fix it.", "Looking at the failure first."] and texts[-1] == FIXED


@pytest.fixture
def anthropic() -> Iterator[ScriptedAnthropic]:
    with ScriptedAnthropic() as scripted:
        yield scripted


def test_a_later_claude_code_run_is_given_the_earlier_conversation(
    session_factory: SessionFactory,
    rules_dir: Path,
    project: RunnerConfig,
    anthropic: ScriptedAnthropic,
) -> None:
    provider = ProviderSettings(
        binary=str(real_cli("claude")), base_url=anthropic.url, api_key=SecretStr("sk-ant-k-01")
    )
    prices = {"claude-test": ModelPrice(input_usd_per_mtok=3, output_usd_per_mtok=15)}
    settings = project.settings.model_copy(
        update={"providers": {"claude-code": provider}, "model_prices": prices}
    )
    config = RunnerConfig(settings, project.executors, project.base_env)
    thread_rule(session_factory, rules_dir, "claude-code", "claude-test")
    anthropic.script(ClaudeTurn.tool("Read", file_path="src/app.py"), ClaudeTurn.text(FIXED))
    _, first_status = run(session_factory, config, "Fix the failing test.")
    anthropic.script(ClaudeTurn.text("Addressed."))
    seen = len(anthropic.conversation)

    _, second_status = run(session_factory, config, "Address the review comment.")

    assert first_status == second_status == RunStatus.SUCCEEDED
    second_request = json.dumps(anthropic.conversation[seen].body["messages"])
    assert "Fix the failing test." in second_request and FIXED in second_request
    assert "call Read" in second_request and "print('hi')" in second_request
    assert second_request.index(FIXED) < second_request.index("Address the review comment.")


def test_two_sessions_ending_at_once_on_postgresql_both_keep_their_entry(
    database_url: str,
) -> None:
    engine = create_db_engine(database_url)
    sessions = create_session_factory(engine)
    ending = [
        threads_db.NewEntry("default", "pr-7", run, "session", "fixer", "completed", "", False,
                            [Turn("user", f"task of {run}")])
        for run in ("a", "b")
    ]  # fmt: skip

    with sessions.begin() as first:  # a's transaction is open while b's commits
        threads_db.append_entry(first, ending[0])
        with sessions.begin() as second:
            threads_db.append_entry(second, ending[1])

    with sessions() as session:
        stored = threads_db.entries_of(session, "default", "pr-7")
    engine.dispose()
    assert sorted(e.run_id for e in stored) == ["a", "b"]
