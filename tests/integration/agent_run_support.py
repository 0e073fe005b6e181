"""Agent-session runs through the real runner, for the tests: the recorded Chat Completions answers
(`tool_calls`, `text`) a scripted server on 127.0.0.1 gives, a SQLite database, a runner config
on a real git project that points the `openai` provider at that server, and the `reviewer` rule.

The fixtures (`session_factory`, `rules_dir`, `llm`, `config`) are imported by the test modules
that use them; they override the integration suite's PostgreSQL `session_factory`."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import ProviderSettings
from ade_workers.engine.runner_config import RunnerConfig
from tests.fake_llm import Reply, ScriptedModelServer, load_fixture
from tests.git_project import make_git_project, make_runner_config, migrated_sqlite
from tests.unit.conftest import add_rule

RECORDED = load_fixture("openai", "chat-completions.tool-calls.response.json")


def tool_calls(*calls: tuple[str, str, dict[str, Any]]) -> Reply:
    """The recorded tool-call answer, carrying these calls instead of the recorded one."""
    body = copy.deepcopy(RECORDED)
    message = body["choices"][0]["message"]
    message["tool_calls"] = [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for cid, name, args in calls
    ]
    return Reply(body=body)


def text(content: str) -> Reply:
    body = copy.deepcopy(RECORDED)
    body["choices"][0]["message"] = {"role": "assistant", "content": content}
    body["choices"][0]["finish_reason"] = "stop"
    return Reply(body=body)


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
def config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: ScriptedModelServer
) -> RunnerConfig:
    base = make_runner_config(make_git_project(tmp_path, monkeypatch), tmp_path)
    provider = ProviderSettings(base_url=llm.url, api_key=SecretStr("sk-test-key"))
    settings = base.settings.model_copy(update={"providers": {"openai": provider}})
    return RunnerConfig(settings, base.executors, base.base_env)


def agent_rule(rules_dir: Path, session_factory: SessionFactory, extra: str = "") -> None:
    add_rule(session_factory, rules_dir, "reviewer", f"""
id: reviewer
triggers: [{{type: manual}}, {{type: github.pr_commented}}]
review_profile: full
execution:
  kind: agent-session
  provider: openai
  model: gpt-4o-mini
  permission_mode: plan
  tool_palette: [repo]
  prompt: "Review the project. Request: {{{{trigger.body}}}}"
  {extra}
""")  # fmt: skip


def run_of(session_factory: SessionFactory, run_id: str) -> Any:
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        session.expunge(run)
        events = run_events_db.events_of(session, run_id, "agent.")
    return run, events


def manual_with_body(body: str) -> TriggerEvent:
    return TriggerEvent("manual", "manual", {"inputs": {}, "body": body}, None)
