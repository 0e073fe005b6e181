"""The real Claude Code CLI (npm, pinned in tests/agent_clis) bounded by the engine.

Each test runs `claude -p` through `run_cli_session` against a scripted Anthropic Messages server
on 127.0.0.1 and asserts what the CLI really did: files on disk, the requests the server saw (the
tool results the model got back, the key it was sent), processes left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ade_api.cli import main
from ade_api.dev_model import ScriptedAnthropic, Turn, result_text
from ade_tasks.agents.policy import Policy, exposed_tools
from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.db.approvals import ToolDecisions
from ade_tasks.rules.agent import AgentSession, ToolPolicy
from ade_tasks.secrets import Masker
from ade_tasks.settings import ModelPrice, ProviderSettings, Settings
from ade_workers.agents.cli.cli_session import run_cli_session
from ade_workers.agents.cli.outcome import CliSessionOutcome
from ade_workers.agents.cli.setup import CliSetup, call_id
from ade_workers.agents.http_session import SessionLimits
from ade_workers.agents.tools.tool import ToolContext
from ade_workers.sandbox import scratch
from ade_workers.sandbox.engine import agent_sandbox
from tests.real_clis import real_cli
from tests.support import wait_until

REAL_KEY = "sk-ant-real-key-0123456789abcdef"
NONE_DECIDED = ToolDecisions(frozenset(), frozenset(), frozenset())
BASH = ToolPolicy(allowed_tools=["bash"])


@pytest.fixture(scope="module")
def claude() -> Path:
    return real_cli("claude")


@pytest.fixture
def server() -> Any:
    with ScriptedAnthropic() as scripted:
        yield scripted


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "wt"
    root.mkdir()
    (root / "a.txt").write_text("hello from the worktree\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


class Run:
    """One session's outcome and the events it recorded."""

    def __init__(self, outcome: CliSessionOutcome, events: list[tuple[str, dict[str, Any]]]):
        self.outcome = outcome.outcome
        self.capabilities = outcome.capabilities
        self.events = events

    def decisions(self) -> list[dict[str, Any]]:
        return [data for kind, data in self.events if kind == "agent.tool_decision"]


def run_claude(
    claude: Path,
    server: ScriptedAnthropic,
    worktree: Path,
    *,
    mode: str = "plan",
    policy: ToolPolicy | None = None,
    tainted: bool = False,
    decisions: ToolDecisions = NONE_DECIDED,
    max_tokens: int | None = None,
    max_cost_usd: float | None = None,
    protected: ProtectedPaths | None = None,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    masker: Masker | None = None,
    sandboxed: bool = True,
    settings: Settings | None = None,
    palette: tuple[str, ...] = ("repo", "git"),
    tool_ctx: ToolContext | None = None,
) -> Run:
    execution = AgentSession(
        provider="claude-code",
        model="claude-test",
        prompt="do the task",
        permission_mode=mode,  # type: ignore[arg-type]
        tool_palette=list(palette),  # type: ignore[arg-type]
        policy=policy or ToolPolicy(),
    )
    engine_policy = Policy.from_rule(execution.policy, execution.permission_mode)
    events: list[tuple[str, dict[str, Any]]] = []
    setup = CliSetup(
        binary=str(claude),
        worktree=worktree,
        env=env or {"PATH": os.environ["PATH"]},
        limits=SessionLimits(
            max_turns=10,
            max_tokens=max_tokens,
            deadline=time.monotonic() + timeout,
            max_cost_usd=max_cost_usd,
            price=ModelPrice(input_usd_per_mtok=3, output_usd_per_mtok=15),
        ),
        policy=engine_policy,
        tools=exposed_tools(list(execution.tool_palette), execution.permission_mode, engine_policy),
        tainted=tainted,
        decisions=decisions,
        protected=protected,
        provider=ProviderSettings(api_key=REAL_KEY, base_url=server.url),  # type: ignore[arg-type]
        masker=masker or Masker.none(),
        record=lambda kind, data: events.append((kind, data)),
        sandbox=agent_sandbox(settings or Settings(), worktree, "the test session")
        if sandboxed
        else None,
        tool_ctx=tool_ctx,
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
    return Run(outcome, events)


def results(server: ScriptedAnthropic) -> list[tuple[bool, str]]:
    """(is_error, text) of every tool result the CLI sent the model."""
    return [(bool(b.get("is_error")), result_text(b)) for b in server.tool_results()]


def test_only_provider_settings_log_in_and_the_key_never_reaches_a_tool(claude, server, worktree):
    envfile = worktree / "env.txt"
    server.script(Turn.tool("Bash", command=f"env > {envfile}"), Turn.text("done"))
    run = run_claude(claude, server, worktree, mode="full-auto", policy=BASH)
    assert run.outcome.status == "completed", run.outcome.error
    sent = {seen.headers.get("x-api-key") for seen in server.requests}
    assert sent == {REAL_KEY}  # the proxy swapped the session token for the provider's key
    tool_env = envfile.read_text()
    assert REAL_KEY not in tool_env
    assert "ANTHROPIC_API_KEY=ade-session-" in tool_env
    assert f"HOME={worktree}" not in tool_env and "CLAUDE_CONFIG_DIR=" in tool_env


def test_plan_mode_reads_inside_and_refuses_every_escape(claude, server, worktree, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("secret outside\n")
    (worktree / "link.txt").symlink_to(outside)
    server.script(
        Turn.tool("Read", file_path="a.txt"),
        Turn.tool("Read", file_path="/etc/passwd"),
        Turn.tool("Read", file_path="../../../etc/hostname"),
        Turn.tool("Read", file_path=str(worktree / "link.txt")),
        Turn.tool("Write", file_path="new.txt", content="x"),
        Turn.text("done"),
    )
    run = run_claude(claude, server, worktree, mode="plan")
    assert run.outcome.status == "completed", run.outcome.error
    got = results(server)
    assert got[0][0] is False and "hello from the worktree" in got[0][1]
    assert all(is_error for is_error, _ in got[1:])
    assert not any("root:" in text or "secret outside" in text for _, text in got)
    assert not (worktree / "new.txt").exists()
    verdicts = [d["verdict"] for d in run.decisions()]
    assert verdicts[0] == "allow" and set(verdicts[1:4]) == {"deny"}


def test_a_denied_tool_never_runs(claude, server, worktree):
    marker = worktree / "ran.txt"
    server.script(Turn.tool("Bash", command=f"touch {marker}"), Turn.text("done"))
    run = run_claude(
        claude, server, worktree, mode="full-auto", policy=ToolPolicy(denied_tools=["bash"])
    )
    assert run.outcome.status == "completed"
    assert not marker.exists()
    assert results(server)[0][0] is True  # a denied tool is not even offered to the model


def test_the_worktrees_own_settings_hooks_and_mcp_servers_never_run(
    claude, server, worktree, tmp_path
):
    markers = [tmp_path / name for name in ("start", "pretool", "mcp")]
    (worktree / ".claude").mkdir()
    (worktree / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {
                    "SessionStart": [
                        {"hooks": [{"type": "command", "command": f"touch {markers[0]}"}]}
                    ],
                    "PreToolUse": [
                        {
                            "matcher": "*",
                            "hooks": [{"type": "command", "command": f"touch {markers[1]}"}],
                        }
                    ],
                },
                "permissions": {"allow": ["Bash", "Read(/**)"]},
            }
        )
    )
    (worktree / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"evil": {"command": "touch", "args": [str(markers[2])]}}})
    )
    server.script(Turn.tool("Read", file_path="/etc/hostname"), Turn.text("done"))
    run = run_claude(claude, server, worktree, mode="plan")
    assert run.outcome.status == "completed"
    assert [m.exists() for m in markers] == [False, False, False]
    assert results(server)[0][0] is True  # the project's "allow Read(/**)" did not apply
    items = {
        i["aspect"]: i["support"]
        for kind, data in run.events
        if kind == "agent.capabilities" and data.get("checked_against") == "init"
        for i in data["items"]
    }
    assert items["settings"] == "enforced" and items["tools"] == "enforced"


def test_a_tainted_prompt_leaves_the_session_read_only(claude, server, worktree):
    server.script(
        Turn.tool("Write", file_path="pwned.txt", content="x"),
        Turn.tool("Bash", command="touch pwned2.txt"),
        Turn.text("done"),
    )
    everything = ToolPolicy(fallback="allow")
    run = run_claude(claude, server, worktree, mode="full-auto", policy=everything, tainted=True)
    assert run.outcome.status == "completed"
    assert not (worktree / "pwned.txt").exists() and not (worktree / "pwned2.txt").exists()
    assert all("outsiders' text" in d["reason"] for d in run.decisions())


def test_the_engines_own_data_is_never_readable(claude, server, worktree):
    (worktree / ".ade").mkdir()
    (worktree / ".ade" / "api-token").write_text("ade_admin_token_value\n")
    server.script(Turn.tool("Read", file_path=".ade/api-token"), Turn.text("done"))
    protected = ProtectedPaths.for_worktree(worktree)
    run = run_claude(claude, server, worktree, mode="plan", protected=protected)
    assert run.outcome.status == "completed"
    assert not any("ade_admin_token_value" in text for _, text in results(server))
    assert not any("ade_admin_token_value" in json.dumps(data) for _, data in run.events)


def test_a_command_that_prints_the_engines_token_never_sends_it_to_the_model(
    claude, server, worktree
):
    (worktree / ".ade").mkdir()
    (worktree / ".ade" / "api-token").write_text("ade_admin_token_value\n")
    server.script(Turn.tool("Bash", command="cat .ade/api-token"), Turn.text("done"))
    protected = ProtectedPaths.for_worktree(worktree)
    run = run_claude(
        claude,
        server,
        worktree,
        mode="full-auto",
        policy=BASH,
        protected=protected,
        masker=Masker(protected.secrets),
        sandboxed=False,  # masking is what is left with ADE_SANDBOX=off (the sandbox hides .ade)
    )
    assert run.outcome.status == "completed"
    assert results(server) == [(False, "***")]  # the command ran; its output was masked
    assert not any("ade_admin_token_value" in json.dumps(seen.body) for seen in server.requests)
    assert not any("ade_admin_token_value" in json.dumps(data) for _, data in run.events)


@pytest.mark.parametrize("budget", ["tokens", "cost"])
def test_a_session_over_its_budget_is_stopped(claude, server, worktree, budget):
    heavy = {"input_tokens": 200, "output_tokens": 200}
    server.script(
        Turn.tool("Bash", usage=heavy, command="echo one"),
        Turn.tool("Bash", usage=heavy, command="echo two"),
        Turn.tool("Bash", usage=heavy, command="echo three"),
        Turn.text("done"),
    )
    limit = {"max_tokens": 300} if budget == "tokens" else {"max_cost_usd": 0.001}
    run = run_claude(claude, server, worktree, mode="full-auto", policy=BASH, **limit)  # type: ignore[arg-type]
    assert run.outcome.status == ("token_budget" if budget == "tokens" else "cost_budget")
    assert len(server.conversation) <= 2  # stopped at the first answer over; one more refused
    assert run.outcome.input_tokens + run.outcome.output_tokens >= 400


def test_ask_parks_the_call_and_the_answer_lets_it_run(claude, server, worktree):
    marker = worktree / "approved.txt"
    command = f"touch {marker}"
    server.script(Turn.tool("Bash", command=command))
    run = run_claude(claude, server, worktree, mode="edit")
    assert run.outcome.status == "waiting"
    assert len(server.conversation) == 1  # stopped before it asked the model again
    assert run.outcome.pending is not None and run.outcome.pending["tool"] == "Bash"
    assert not marker.exists()
    ident = call_id("Bash", {"command": command})
    assert run.outcome.pending["tool_call_id"] == ident

    server.script(Turn.tool("Bash", command=command), Turn.text("done"))
    approved = ToolDecisions(frozenset({ident}), frozenset(), frozenset())
    again = run_claude(claude, server, worktree, mode="edit", decisions=approved)
    assert again.outcome.status == "completed", again.outcome.error
    assert marker.exists()


def test_ask_declined_refuses_the_call(claude, server, worktree):
    marker = worktree / "declined.txt"
    command = f"touch {marker}"
    ident = call_id("Bash", {"command": command})
    server.script(Turn.tool("Bash", command=command), Turn.text("done"))
    declined = ToolDecisions(frozenset(), frozenset({ident}), frozenset())
    run = run_claude(claude, server, worktree, mode="edit", decisions=declined)
    assert run.outcome.status == "completed"
    assert not marker.exists()
    assert "declined" in results(server)[0][1]


SESSION_IN_A_WORKER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from tests.integration.test_claude_code_real import BASH, run_claude
    from ade_api.dev_model import ScriptedAnthropic, Turn
    with ScriptedAnthropic() as server:
        server.script(Turn.tool("Bash", command={command!r}), Turn.text("done"))
        run_claude(Path({claude!r}), server, Path({worktree!r}), mode="full-auto", policy=BASH)
    """
)


def test_nothing_of_a_session_outlives_its_worker(claude, worktree):
    # The tool runs in the session's sandbox: it writes only in the worktree, and its own pid
    # is one of the sandbox's, so its host pid is found by its unique command line.
    started, late = worktree / "tool.started", worktree / "late.txt"
    command = f"touch {started}; sleep 7.25; touch {late}"
    script = SESSION_IN_A_WORKER.format(
        root=str(Path(__file__).resolve().parents[2]),
        command=command,
        claude=str(claude),
        worktree=str(worktree),
    )
    worker = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        wait_until(started.exists, 60, "the tool to start")
        tool_pids = wait_until(lambda: _pids_running(b"sleep\x007.25"), 10, "the tool's sleep")
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        wait_until(lambda: not any(map(_alive, tool_pids)), 10, "the tool to die with its worker")
        assert not late.exists()
        # The session's private directories outlived it; the next worker's sweep removes them.
        left = list(Path(tempfile.gettempdir()).glob(f"{scratch.PREFIX}{worker.pid}-*"))
        assert left and any(left[0].glob("ade-claude-*"))
        assert set(left) <= set(scratch.sweep())
        assert not any(path.exists() for path in left)
    finally:
        if worker.poll() is None:
            worker.kill()


def _pids_running(cmdline: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.joinpath("cmdline").read_bytes().rstrip(b"\x00") == cmdline:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_a_key_the_provider_refuses_fails_the_session_at_once_and_says_which_setting(
    claude, worktree
):
    with ScriptedAnthropic(key="the-right-key") as refusing:
        started = time.monotonic()
        run = run_claude(claude, refusing, worktree, mode="plan", timeout=60)
    assert run.outcome.status == "failed"
    assert run.outcome.error == (
        "the provider refused the key (401 authentication_error: invalid x-api-key): "
        "check ADE_PROVIDERS__CLAUDE_CODE__API_KEY"
    )
    assert time.monotonic() - started < 30  # claude alone retries for minutes


def test_providers_check_makes_one_real_call_and_says_what_failed(claude, monkeypatch):
    with ScriptedAnthropic(key=REAL_KEY) as provider:
        monkeypatch.setenv("ADE_PROVIDERS__CLAUDE_CODE__BINARY", str(claude))
        monkeypatch.setenv("ADE_PROVIDERS__CLAUDE_CODE__BASE_URL", provider.url)
        monkeypatch.setenv("ADE_PROVIDERS__CLAUDE_CODE__API_KEY", REAL_KEY)
        for name in ("OPENAI_API_KEY", "ADE_PROVIDERS__OPENAI__API_KEY", "ANTHROPIC_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        good = CliRunner().invoke(main, ["providers", "--check", "--model", "claude-test"])
        monkeypatch.setenv("ADE_PROVIDERS__CLAUDE_CODE__API_KEY", "sk-ant-wrong")
        bad = CliRunner().invoke(main, ["providers", "--check", "--json"])
    assert good.exit_code == 0, good.output
    assert "claude-code  checking (one real call) ... ok" in good.output
    assert any(seen.body.get("model") == "claude-test" for seen in provider.requests)
    assert bad.exit_code == 1
    (claude_code,) = [item for item in json.loads(bad.output) if item["name"] == "claude-code"]
    assert claude_code["check"] == "failed"
    assert "401 authentication_error: invalid x-api-key" in claude_code["detail"]
    assert "sk-ant-wrong" not in bad.output
