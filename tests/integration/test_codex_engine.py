"""The real Codex CLI bounded by the engine: `run_cli_session` with the engine's policy, model
proxy and approvals, against a scripted Responses API server on 127.0.0.1. Assertions are on
what codex did: files, the requests the server saw, the outputs the model got back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ade_api.cli import main
from ade_tasks.agents.policy import Policy, exposed_tools
from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.db.approvals import ToolDecisions
from ade_tasks.rules.agent import AgentSession, ToolPolicy
from ade_tasks.secrets import Masker
from ade_tasks.settings import ModelPrice, ProviderSettings, Settings
from ade_workers.agents.cli.cli_session import run_cli_session
from ade_workers.agents.cli.outcome import CliSessionOutcome
from ade_workers.agents.cli.setup import CliSetup, call_id
from ade_workers.agents.http_session import NO_DECISIONS, SessionLimits
from ade_workers.sandbox.engine import agent_sandbox
from tests.fake_responses import ScriptedResponsesServer, Turn, Usage, add_file_patch
from tests.real_clis import real_cli
from tests.support import wait_until

KEY = "sk-codex-engine-key-0123456789"
MODEL = "gpt-5.5"  # a slug codex 0.169 knows, so it offers apply_patch
BASH = ToolPolicy(allowed_tools=["bash"])
WRITES = ToolPolicy(allowed_tools=["write_file", "edit_file"])


@pytest.fixture(scope="module")
def codex() -> Path:
    return real_cli("codex")


@pytest.fixture
def server() -> Any:
    with ScriptedResponsesServer() as scripted:
        yield scripted


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "wt"
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def run_codex(
    codex: Path,
    server: ScriptedResponsesServer,
    worktree: Path,
    *,
    mode: str = "full-auto",
    policy: ToolPolicy | None = None,
    tainted: bool = False,
    decisions: ToolDecisions = NO_DECISIONS,
    max_tokens: int | None = None,
) -> tuple[CliSessionOutcome, list[tuple[str, dict[str, Any]]]]:
    execution = AgentSession(
        provider="codex",
        model=MODEL,
        prompt="do the task",
        permission_mode=mode,  # type: ignore[arg-type]
        tool_palette=["repo", "git"],
        policy=policy or ToolPolicy(),
    )
    engine_policy = Policy.from_rule(execution.policy, execution.permission_mode)
    events: list[tuple[str, dict[str, Any]]] = []
    setup = CliSetup(
        binary=str(codex),
        worktree=worktree,
        env={"PATH": os.environ["PATH"]},
        limits=SessionLimits(
            max_turns=30,
            max_tokens=max_tokens,
            deadline=time.monotonic() + 90,
            price=ModelPrice(input_usd_per_mtok=1, output_usd_per_mtok=1),
        ),
        policy=engine_policy,
        tools=exposed_tools(list(execution.tool_palette), execution.permission_mode, engine_policy),
        tainted=tainted,
        decisions=decisions,
        protected=ProtectedPaths.for_worktree(worktree),
        provider=ProviderSettings(api_key=KEY, base_url=f"{server.url}/v1"),  # type: ignore[arg-type]
        masker=Masker.none(),
        record=lambda kind, data: events.append((kind, data)),
        sandbox=agent_sandbox(Settings(), worktree, "the test session"),
    )
    outcome = run_cli_session(
        execution,
        setup,
        prompt=execution.prompt,
        system=None,
        deadline=setup.limits.deadline,
        should_stop=lambda: False,
        kill_grace=1.0,
    )
    return outcome, events


def test_only_the_provider_settings_log_in_and_commands_never_see_the_key(codex, server, worktree):
    envfile = worktree / "env.txt"
    server.script(Turn.command(f"env > {envfile}"), Turn.text("done"))
    ran, _ = run_codex(codex, server, worktree, policy=BASH)
    assert ran.outcome.status == "completed", ran.outcome.error
    auth = {r.headers.get("authorization") for r in server.model_requests()}
    assert auth == {f"Bearer {KEY}"}  # the proxy swapped the session token for the key
    assert KEY not in envfile.read_text() and "ade-session-" not in envfile.read_text()


def test_denied_bash_is_enforced_and_the_command_never_runs(codex, server, worktree):
    marker = worktree / "ran.txt"
    server.script(Turn.command(f"touch {marker}"), Turn.text("done"))
    ran, events = run_codex(
        codex, server, worktree, policy=ToolPolicy(denied_tools=["bash"], fallback="allow")
    )
    assert ran.outcome.status == "completed"
    assert not marker.exists()
    verdicts = [d["verdict"] for k, d in events if k == "agent.tool_decision"]
    assert verdicts == ["deny"]


def test_a_change_outside_the_worktree_is_refused(codex, server, worktree, tmp_path):
    outside = tmp_path / "outside.txt"
    server.script(Turn.patch(add_file_patch(str(outside), "x")), Turn.text("done"))
    ran, _ = run_codex(codex, server, worktree, policy=WRITES)
    assert ran.outcome.status == "completed"
    assert not outside.exists()


def test_edit_mode_asks_for_a_command_and_the_answer_lets_it_run(codex, server, worktree):
    marker = worktree / "approved.txt"
    command = f"touch {marker}"
    server.script(Turn.command(command))
    first, _ = run_codex(codex, server, worktree, mode="edit", policy=WRITES)
    assert first.outcome.status == "waiting"
    assert first.outcome.pending is not None and first.outcome.pending["tool"] == "bash"
    assert not marker.exists()

    approved = ToolDecisions(
        frozenset({call_id("bash", {"command": first.outcome.pending["arguments"]["command"]})}),
        frozenset(),
        frozenset(),
    )
    server.script(Turn.command(command), Turn.text("done"))
    second, _ = run_codex(codex, server, worktree, mode="edit", policy=WRITES, decisions=approved)
    assert second.outcome.status == "completed", second.outcome.error
    assert marker.exists()


def test_a_tainted_prompt_refuses_commands(codex, server, worktree):
    marker = worktree / "pwned.txt"
    server.script(Turn.command(f"touch {marker}"), Turn.text("done"))
    ran, _ = run_codex(codex, server, worktree, policy=ToolPolicy(fallback="allow"), tainted=True)
    assert ran.outcome.status == "completed"
    assert not marker.exists()


def test_a_session_over_its_token_budget_is_stopped(codex, server, worktree):
    marker = worktree / "second.txt"
    heavy = Usage(input_tokens=400, output_tokens=100)
    server.script(
        Turn.command("echo one", usage=heavy),
        Turn.command(f"touch {marker}", usage=heavy),
        Turn.text("done"),
    )
    ran, _ = run_codex(codex, server, worktree, policy=BASH, max_tokens=300)
    assert ran.outcome.status == "token_budget"
    assert "over the budget of 300" in (ran.outcome.error or "")
    assert not marker.exists()


def test_an_edit_session_in_a_worktree_holding_engine_data_cannot_reach_it(
    codex, server, worktree
):
    # The sandbox shows every `.ade` below the worktree as an empty, read-only directory.
    (worktree / ".ade").mkdir()
    (worktree / ".ade" / "api-token").write_text("dev-stack-token-canary\n")
    server.script(
        Turn.command("cat .ade/api-token | rev; echo x > .ade/planted", call_id="c"),
        Turn.text("done"),
    )
    policy = ToolPolicy(allowed_tools=["write_file", "edit_file", "bash"])
    ran, _ = run_codex(codex, server, worktree, mode="edit", policy=policy)
    assert ran.outcome.status == "completed", ran.outcome.error
    assert "yranac" not in server.tool_outputs()["c"]
    assert not (worktree / ".ade" / "planted").exists()


def test_providers_check_runs_one_real_codex_call(codex, server, monkeypatch):
    monkeypatch.setenv("ADE_PROVIDERS__CODEX__BINARY", str(codex))
    monkeypatch.setenv("ADE_PROVIDERS__CODEX__BASE_URL", f"{server.url}/v1")
    monkeypatch.setenv("ADE_PROVIDERS__CODEX__API_KEY", KEY)
    for name in ("ADE_PROVIDERS__CLAUDE_CODE__API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    server.script(Turn.text("ok"))

    result = CliRunner().invoke(main, ["providers", "--check", "--model", MODEL])

    assert result.exit_code == 0, result.output
    assert "codex        checking (one real call) ... ok" in result.output
    assert [r.headers.get("authorization") for r in server.model_requests()] == [f"Bearer {KEY}"]


def test_a_tainted_edit_session_cannot_write_even_inside_the_worktree(codex, server, worktree):
    inside = worktree / "pwned.txt"
    server.script(Turn.patch(add_file_patch("pwned.txt", "x")), Turn.text("done"))
    ran, _ = run_codex(codex, server, worktree, mode="edit", policy=WRITES, tainted=True)
    assert ran.outcome.status == "completed"
    assert not inside.exists()  # read-only sandbox: the change asked, and was refused


def test_codexs_own_question_tool_is_unavailable_outside_its_plan_mode(codex, server, worktree):
    # Pins what codex 0.169 does with request_user_input in the mode the engine runs it in: it
    # answers the model itself and never asks the client, so there is no question to park.
    question = {"id": "branch", "header": "Branch", "question": "Which branch?", "options": []}
    server.script(
        Turn.function_call("request_user_input", {"questions": [question]}), Turn.text("ok")
    )
    ran, events = run_codex(codex, server, worktree, mode="plan")
    assert ran.outcome.status == "completed"
    (output,) = server.tool_outputs().values()
    assert "unavailable in Default mode" in output
    assert [k for k, _ in events if k == "agent.tool_decision"] == []


SESSION_IN_A_WORKER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from tests.integration.test_codex_engine import BASH, run_codex
    from tests.fake_responses import ScriptedResponsesServer, Turn
    with ScriptedResponsesServer() as server:
        server.script(Turn.command({command!r}), Turn.text("done"))
        run_codex(Path({codex!r}), server, Path({worktree!r}), policy=BASH)
    """
)


def test_nothing_of_a_codex_session_outlives_its_worker(codex, worktree):
    pid_file, late = worktree / "tool.pid", worktree / "late.txt"  # the sandbox writes only here
    script = SESSION_IN_A_WORKER.format(
        root=str(Path(__file__).resolve().parents[2]),
        command=f"echo $$ > {pid_file}; sleep 5; touch {late}",
        codex=str(codex),
        worktree=str(worktree),
    )
    worker = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        # $$ is the command's pid in codex's sandbox (a pid namespace): only a sign it started.
        wait_until(lambda: pid_file.read_text().strip(), 60, "the command to start")
        assert len(running_in(worktree)) >= 2  # codex and its command, at least
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        wait_until(lambda: not running_in(worktree), 10, "codex and its command to die")
        assert not late.exists()
    finally:
        if worker.poll() is None:
            worker.kill()


def running_in(directory: Path) -> list[int]:
    """The live processes whose working directory is `directory`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(directory) and not _zombie(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
