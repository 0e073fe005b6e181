"""Agent sessions as an unprivileged user (`ADE_AGENT_USER=nobody`) on a worker running as root.

Through the real runner with the real claude and codex CLIs against scripted model servers, and
the HTTP providers' `bash` tool: what the agent runs is the user's (files it writes, `id -u`),
the engine's data directory is out of its reach even to a shell command, the worker's git still
sees a clean worktree, and nothing the user started outlives its container.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from ade_api.dev_model import ScriptedAnthropic, Turn, result_text
from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.db.engine import SessionFactory
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import ProviderSettings
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.agents.tools.registry import run_tool
from ade_workers.agents.tools.tool import ToolContext
from ade_workers.containment.process import run_process
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests import agent_user_support
from tests.agent_user_support import AGENT_USER, agent_user
from tests.fake_responses import ScriptedResponsesServer
from tests.fake_responses import Turn as ResponsesTurn
from tests.git_project import make_git_project, make_runner_config, migrated_sqlite
from tests.integration.agent_run_support import run_of
from tests.real_clis import real_cli
from tests.support import wait_until
from tests.unit.conftest import add_rule

KEY = "sk-agent-user-test-key-0123456789"
TOKEN = "ade-admin-token-of-the-engine-0123456789"


@pytest.fixture
def open_dir() -> Iterator[Path]:
    yield from agent_user_support.open_dir()


@pytest.fixture
def session_factory(tmp_path: Path) -> SessionFactory:
    return migrated_sqlite(tmp_path)


@pytest.fixture
def config(open_dir: Path, monkeypatch: pytest.MonkeyPatch) -> RunnerConfig:
    """A runner whose agents run as `nobody`, with the engine's data (0700) beside the project."""
    agent_user()
    base = make_runner_config(make_git_project(open_dir, monkeypatch), open_dir)
    data = open_dir / "data"
    data.mkdir(mode=0o700)
    (data / "api-token").write_text(TOKEN)
    settings = base.settings.model_copy(update={"agent_user": AGENT_USER, "data_dir": data})
    return RunnerConfig(settings, base.executors, base.base_env)


def agent_rule(session_factory: SessionFactory, rules_dir: Path, provider: str, model: str) -> None:
    add_rule(session_factory, rules_dir, provider, f"""
id: {provider}
triggers: [{{type: manual}}]
execution:
  kind: agent-session
  provider: {provider}
  model: {model}
  permission_mode: full-auto
  tool_palette: [repo, git]
  policy: {{allowed_tools: [bash, write_file, edit_file]}}
  prompt: Look around.
""")  # fmt: skip


def run_rule(
    session_factory: SessionFactory, config: RunnerConfig, rule: str, provider: ProviderSettings
) -> tuple[RunStatus, Any, list[tuple[str, dict[str, Any]]]]:
    settings = config.settings.model_copy(update={"providers": {rule: provider}})
    run_id = dispatch(session_factory, InMemorySender(), rule, TriggerEvent.manual()).run.id
    status = execute_run(
        session_factory, RunnerConfig(settings, config.executors, config.base_env), run_id, "w1"
    )
    run, events = run_of(session_factory, run_id)
    return status, run, events


def engine_data_support(events: list[tuple[str, dict[str, Any]]]) -> set[tuple[str, str]]:
    """(support, how) of the engine_data item of every capability report the run recorded."""
    return {
        (item["support"], item["reason"])
        for kind, data in events
        if kind == "agent.capabilities"
        for item in data["items"]
        if item["aspect"] == "engine_data"
    }


def owner_and_text(path: Path) -> tuple[int, str]:
    return os.stat(path).st_uid, path.read_text()


def unchanged_by_git(project: Path) -> list[str]:
    """What the worker's own git says changed in `project` (it must still own it)."""
    status = subprocess.run(
        ["git", "-C", str(project), "status", "--porcelain"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return sorted(status.stdout.splitlines())


#: One shell command that shows who runs it, tries the engine's token and uses git.
PROBE = "id -u > who.txt; cat {token} || echo refused; git status --short >> who.txt"


def test_a_claude_session_runs_as_the_agent_user_and_cannot_read_the_engines_data(
    session_factory: SessionFactory, tmp_path: Path, config: RunnerConfig
) -> None:
    agent_rule(session_factory, tmp_path / "rules", "claude-code", "claude-test")
    project = config.settings.project_root("default")
    token = config.settings.data_dir / "api-token"
    with ScriptedAnthropic() as server:
        server.script(Turn.tool("Bash", command=PROBE.format(token=token)), Turn.text("done"))
        claude = ProviderSettings(
            binary=str(real_cli("claude")), base_url=server.url, api_key=SecretStr(KEY)
        )
        status, run, events = run_rule(session_factory, config, "claude-code", claude)

        (result,) = server.tool_results()
        seen = json.dumps([request.body for request in server.requests])
    assert status == RunStatus.SUCCEEDED, run.error
    uid, text = owner_and_text(project / "who.txt")
    assert uid == 65534 and text.splitlines()[0] == "65534"
    assert "?? who.txt" in text  # its git reads the worker's repository
    assert "Permission denied" in result_text(result) and "refused" in result_text(result)
    assert TOKEN not in seen
    assert unchanged_by_git(project) == ["?? who.txt"]
    ((support, how),) = engine_data_support(events)
    assert support == "enforced" and f"runs as {AGENT_USER}" in how


def test_a_codex_session_runs_as_the_agent_user_and_cannot_read_the_engines_data(
    session_factory: SessionFactory, tmp_path: Path, config: RunnerConfig
) -> None:
    agent_rule(session_factory, tmp_path / "rules", "codex", "gpt-5.5")
    project = config.settings.project_root("default")
    token = config.settings.data_dir / "api-token"
    with ScriptedResponsesServer() as responses:
        responses.script(
            ResponsesTurn.command(f"id -u > who.txt; cat {token} || echo refused"),
            ResponsesTurn.text("done"),
        )
        codex = ProviderSettings(
            binary=str(real_cli("codex")), base_url=f"{responses.url}/v1", api_key=SecretStr(KEY)
        )
        status, run, events = run_rule(session_factory, config, "codex", codex)
        seen = json.dumps([request.json for request in responses.model_requests()])

    assert status == RunStatus.SUCCEEDED, run.error
    assert owner_and_text(project / "who.txt") == (65534, "65534\n")
    assert "Permission denied" in seen and TOKEN not in seen
    assert unchanged_by_git(project) == ["?? who.txt"]
    ((support, how),) = engine_data_support(events)
    assert support == "enforced" and f"runs as {AGENT_USER}" in how


def test_an_unknown_agent_user_fails_the_step_with_the_setting_to_fix(
    session_factory: SessionFactory, tmp_path: Path, config: RunnerConfig
) -> None:
    agent_rule(session_factory, tmp_path / "rules", "claude-code", "claude-test")
    settings = config.settings.model_copy(update={"agent_user": "no-such-ade-agent"})
    config = RunnerConfig(settings, config.executors, config.base_env)

    status, run, _ = run_rule(session_factory, config, "claude-code", ProviderSettings())

    assert status == RunStatus.FAILED
    assert "ADE_AGENT_USER='no-such-ade-agent': no such user" in (run.error or "")


def test_an_http_sessions_bash_runs_as_the_agent_user_and_writes_stay_its_own(
    open_dir: Path,
) -> None:
    user = agent_user()
    tree = open_dir / "wt"
    tree.mkdir()
    secret = open_dir / "secret.env"
    secret.write_text("DEPLOY=1")
    secret.chmod(0o600)
    (tree / "root-only.txt").write_text("the worker's")
    (tree / "root-only.txt").chmod(0o600)
    user.open_worktree(tree, ProtectedPaths.for_worktree(tree))
    (tree / "later.txt").write_text("made by the worker after the worktree was opened")
    (tree / "later.txt").chmod(0o600)
    ctx = ToolContext(worktree=tree, env={"PATH": os.environ["PATH"]}, user=user)

    wrote = run_tool("write_file", {"path": "notes/todo.txt", "content": "one\n"}, ctx)
    ran = run_tool("bash", {"command": f"id -u; echo two >> notes/todo.txt; cat {secret}"}, ctx)
    read = run_tool("read_file", {"path": "later.txt"}, ctx)

    assert wrote.ok and os.stat(tree / "notes" / "todo.txt").st_uid == 65534
    assert ran.content.splitlines()[0] == "65534"
    assert "Permission denied" in ran.content
    assert (tree / "notes" / "todo.txt").read_text() == "one\ntwo\n"
    # The worker runs read_file with the user's file access: a file the user may not read
    # stays unread, even though the worker could.
    assert not read.ok and "Permission denied" in read.content
    assert run_tool("read_file", {"path": "root-only.txt"}, ctx).ok  # opened to the user


def test_nothing_the_agent_user_starts_outlives_its_container(open_dir: Path) -> None:
    user = agent_user()
    marker = "sleep 317"

    result = run_process(
        ["sh", "-c", f"setsid sh -c '{marker}' & echo started"],
        cwd=open_dir, env={"PATH": os.environ["PATH"]}, timeout=10, user=user.ids,
    )  # fmt: skip

    assert result.output.strip() == "started"

    def left() -> list[str]:
        found = subprocess.run(["pgrep", "-u", AGENT_USER, "-f", marker], capture_output=True)
        return found.stdout.decode().split()

    wait_until(lambda: not left(), 5, "the agent user's daemon to be killed")
