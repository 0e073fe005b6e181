"""CLI agent sessions run for real with a fake `claude` (or `codex`) from tests/fake_cli/ that
replays a recorded stream, hangs, fails or prints noise: `run(...)` runs `run_cli_session` on it
and returns the outcome with the run events it recorded."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ade_tasks.agents.policy import Policy, exposed_tools
from ade_tasks.rules.agent import ToolPolicy
from ade_tasks.rules.steps import AgentExecution
from ade_tasks.secrets import Masker
from ade_workers.agents.cli.cli_session import run_cli_session
from ade_workers.agents.cli.outcome import CliSessionOutcome
from ade_workers.agents.cli.setup import CliSetup
from ade_workers.agents.http_session import NO_DECISIONS, SessionLimits

TESTS = Path(__file__).resolve().parent.parent
FIXTURES = TESTS / "fixtures" / "agents"
FAKE_CLI = TESTS / "fake_cli"
BINARIES = {"claude-code": "claude", "codex": "codex"}
REPORT_TEXT = (
    "Reviewed the change.\n\n```json\n"
    + json.dumps(
        {
            "summary": "Two problems in the parser",
            "findings": [
                {"severity": "error", "path": "src/parse.py", "line": 12, "message": "off by one"},
                {"severity": "warning", "path": "src/parse.py", "message": "slow loop"},
                {"severity": "catastrophic", "message": "not a known severity"},
                "not an object",
            ],
            "confidence": 0.8,
        }
    )
    + "\n```"
)


class Recorder:
    """Collects the events a session records, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]

    def one(self, kind: str) -> dict[str, Any]:
        matches = [data for k, data in self.events if k == kind]
        assert len(matches) == 1, f"{kind}: {len(matches)} events in {self.kinds()}"
        return matches[0]


def execution(provider: str, **overrides: Any) -> AgentExecution:
    fields: dict[str, Any] = {
        "kind": "agent-session",
        "provider": provider,
        "model": "test-model",
        "prompt": "review the change",
        "max_turns": 7,
        "permission_mode": "edit",
        "policy": ToolPolicy(allowed_tools=["Read", "Grep"], denied_tools=["WebFetch"]),
    }
    fields.update(overrides)
    return AgentExecution(**fields)


def run(
    tmp_path: Path,
    provider: str,
    stream: Path | None,
    *,
    extra_env: dict[str, str] | None = None,
    binary: str | None = None,
    timeout: float = 30.0,
    system: str | None = "be thorough",
    masker: Masker | None = None,
    should_stop: Any = lambda: False,
    **overrides: Any,
) -> tuple[CliSessionOutcome, Recorder]:
    worktree = tmp_path / "worktree"
    worktree.mkdir(exist_ok=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FAKE_CLI_")},
        "FAKE_CLI_ARGV_LOG": str(tmp_path / "argv.log"),
        **({"FAKE_CLI_STREAM": str(stream)} if stream else {}),
        **(extra_env or {}),
    }
    recorder = Recorder()
    session = execution(provider, **overrides)
    binary = binary or str(FAKE_CLI / BINARIES[provider])
    deadline = time.monotonic() + timeout
    outcome = run_cli_session(
        session,
        cli_setup(session, binary, worktree, env, deadline, recorder, masker),
        prompt="review the change",
        system=system,
        deadline=deadline,
        should_stop=should_stop,
        kill_grace=0.5,
    )
    return outcome, recorder


def cli_setup(
    session: AgentExecution,
    binary: str,
    worktree: Path,
    env: dict[str, str],
    deadline: float,
    record: Recorder,
    masker: Masker | None,
) -> CliSetup:
    """What the engine gives a claude-code session (the fake CLI ignores most of it)."""
    policy = Policy.from_rule(session.policy, session.permission_mode)
    return CliSetup(
        binary=binary,
        worktree=worktree,
        env=env,
        limits=SessionLimits(max_turns=session.max_turns, max_tokens=None, deadline=deadline),
        policy=policy,
        tools=exposed_tools(list(session.tool_palette), session.permission_mode, policy),
        tainted=False,
        decisions=NO_DECISIONS,
        protected=None,
        provider=None,
        masker=masker or Masker.none(),
        record=record,
    )


def logged_argv(tmp_path: Path) -> list[str]:
    lines = (tmp_path / "argv.log").read_text().splitlines()
    assert len(lines) == 1
    argv: list[str] = json.loads(lines[0])
    return argv


def jsonl(tmp_path: Path, name: str, objects: list[dict[str, Any]]) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(obj) + "\n" for obj in objects))
    return path


def claude_result(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": text,
        "session_id": "s-1",
        "total_cost_usd": 0.01,
        "usage": {"input_tokens": 5, "output_tokens": 6, "cache_read_input_tokens": 7},
        "permission_denials": [],
        **fields,
    }


def process_gone(pid: int) -> bool:
    """Has `pid` exited? A zombie counts as gone (PID 1 here may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"
