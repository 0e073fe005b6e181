"""CLI agent sessions run for real with a fake `claude` that replays recorded streams (or hangs,
fails, prints noise): `run_cli_session` turns them into run events and a `SessionOutcome`. The
real CLIs are driven in test_claude_code_real.py and test_codex_real.py. No services needed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from ade_tasks.agents.policy import Policy, exposed_tools
from ade_tasks.errors import NotFoundError
from ade_tasks.rules.agent import ToolPolicy
from ade_tasks.rules.steps import AgentExecution
from ade_tasks.secrets import Masker
from ade_workers.agents.cli.cli_session import run_cli_session
from ade_workers.agents.cli.outcome import REPORT_INSTRUCTION, CliSessionOutcome, parse_report
from ade_workers.agents.cli.setup import CliSetup
from ade_workers.agents.http_session import NO_DECISIONS, SessionLimits
from tests.support import wait_until

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


# --- the report block ---------------------------------------------------------------------


def test_parse_report_reads_the_last_json_block_and_drops_invalid_findings() -> None:
    report = parse_report('first try\n```json\n{"summary": "old"}\n```\n' + REPORT_TEXT)

    assert report.summary == "Two problems in the parser"
    assert report.findings == [
        {"severity": "error", "path": "src/parse.py", "line": 12, "message": "off by one"},
        {"severity": "warning", "path": "src/parse.py", "message": "slow loop"},
    ]
    assert report.confidence == 0.8
    assert len(report.notes) == 2
    assert "findings[2].severity 'catastrophic'" in report.notes[0]
    assert report.notes[1] == "findings[3] is not an object; dropped"


@pytest.mark.parametrize(
    ("text", "note"),
    [
        ("All good, nothing found.", "no ```json report block in the final message"),
        ('Done.\n```json\n{"summary": oops}\n```', "the report block is not valid JSON"),
        ("Done.\n```json\n[1, 2]\n```", "the report block is not a JSON object"),
    ],
)
def test_parse_report_without_a_usable_block_keeps_the_text_as_summary(
    text: str, note: str
) -> None:
    report = parse_report(text)

    assert report.summary == text
    assert report.findings == []
    assert report.confidence is None
    assert report.notes[0].startswith(note)


def test_parse_report_ignores_bad_confidence_and_fills_a_missing_summary() -> None:
    block = {"findings": [{"severity": "INFO", "message": "m", "line": 0}], "confidence": 7}
    report = parse_report(f"Looked at it.\n```json\n{json.dumps(block)}\n```")

    assert report.summary == "Looked at it."
    assert report.findings == [{"severity": "info", "message": "m"}]
    assert report.confidence is None
    assert len(report.notes) == 3
    assert parse_report(None).summary == ""


# --- successful recorded streams ------------------------------------------------------------


def test_claude_code_recorded_session_completes(tmp_path: Path) -> None:
    result, recorder = run(
        tmp_path, "claude-code", FIXTURES / "claude-code/stream-json.tool-use.jsonl"
    )

    outcome = result.outcome
    assert outcome.status == "completed"
    assert outcome.error is None
    assert (outcome.input_tokens, outcome.output_tokens) == (18, 424)
    assert result.cost_usd == 0.24722425
    assert outcome.turns == 1
    assert outcome.summary == "Here are the files in the current directory."
    assert outcome.findings == []
    assert outcome.pending is None
    assert recorder.kinds() == [
        "agent.capabilities",
        "agent.tool_call",
        "agent.tool_result",
        "agent.cli_result",
        "agent.capabilities",  # checked against the CLI's init event
        "agent.report_note",
    ]
    assert recorder.events[4][1] == {**result.capabilities, "checked_against": "init"}
    assert result.capabilities["cli"] == "claude-code"
    assert recorder.events[1][1]["name"] == "Bash"
    cli_result = recorder.one("agent.cli_result")
    assert cli_result["exit_code"] == 0
    assert cli_result["session_id"] == "40e7b02d-c0f9-4876-9010-f514d4eb0603"
    assert cli_result["usage"] == {
        "input_tokens": 18,
        "output_tokens": 424,
        "cached_input_tokens": 17254,
    }
    assert cli_result["cost_usd"] == 0.24722425
    assert cli_result["permission_denials"] == []
    assert cli_result["errors"] == []

    argv = logged_argv(tmp_path)
    assert argv[:4] == ["-p", "--output-format", "stream-json", "--verbose"]
    assert argv[argv.index("--model") + 1] == "test-model"
    assert argv[argv.index("--max-turns") + 1] == "7"
    # The engine decides every call (its hook); claude's own mode is never a bypass.
    assert argv[argv.index("--permission-mode") + 1] == "default"
    assert argv[argv.index("--setting-sources") + 1] == ""
    assert "--strict-mcp-config" in argv
    hooks = json.loads(argv[argv.index("--settings") + 1])["hooks"]
    assert list(hooks) == ["PreToolUse", "PostToolUse"]
    assert hooks["PreToolUse"] == hooks["PostToolUse"] and hooks["PreToolUse"][0]["matcher"] == "*"
    assert argv[argv.index("--append-system-prompt") + 1] == "be thorough"
    # edit mode, palette repo: Claude's tools for the engine's (Read is read_file, ...).
    assert argv[argv.index("--tools") + 1] == "Read,LS,Glob,Grep,Write,Edit,MultiEdit,NotebookEdit"
    assert "--allowedTools" not in argv and "--dangerously-skip-permissions" not in argv
    assert argv[-1] == f"review the change\n\n{REPORT_INSTRUCTION}"


def test_claude_code_replace_system_mode_uses_system_prompt(tmp_path: Path) -> None:
    result, _ = run(
        tmp_path,
        "claude-code",
        FIXTURES / "claude-code/stream-json.text-only.jsonl",
        system_mode="replace",
        permission_mode="plan",
    )

    argv = logged_argv(tmp_path)
    assert result.outcome.status == "completed"
    assert result.outcome.summary == "4"
    assert argv[argv.index("--system-prompt") + 1] == "be thorough"
    assert "--append-system-prompt" not in argv
    assert argv[argv.index("--permission-mode") + 1] == "plan"


def test_report_block_in_the_final_message_becomes_findings(tmp_path: Path) -> None:
    stream = jsonl(tmp_path, "s.jsonl", [claude_result(REPORT_TEXT)])

    result, recorder = run(tmp_path, "claude-code", stream)

    outcome = result.outcome
    assert outcome.status == "completed"
    assert outcome.summary == "Two problems in the parser"
    assert [f["message"] for f in outcome.findings] == ["off by one", "slow loop"]
    assert outcome.findings[0] == {
        "severity": "error",
        "path": "src/parse.py",
        "line": 12,
        "message": "off by one",
    }
    assert outcome.confidence == 0.8
    assert len(recorder.one("agent.report_note")["notes"]) == 2


def test_stderr_noise_does_not_break_parsing_and_is_recorded(tmp_path: Path) -> None:
    result, recorder = run(
        tmp_path,
        "claude-code",
        FIXTURES / "claude-code/stream-json.text-only.jsonl",
        extra_env={"FAKE_CLI_STDERR": "npm WARN deprecated something\nDebugger attached."},
    )

    assert result.outcome.status == "completed"
    assert recorder.one("agent.cli_result")["errors"] == []
    assert recorder.one("agent.cli_output") == {
        "lines": ["npm WARN deprecated something", "Debugger attached."],
        "total": 2,
    }


def test_secrets_in_the_stream_are_masked_before_recording(tmp_path: Path) -> None:
    secret = "sk-test-must-never-appear-0123456789"
    stream = jsonl(tmp_path, "s.jsonl", [claude_result(f"the key is {secret}")])

    result, recorder = run(tmp_path, "claude-code", stream, masker=Masker([secret]))

    assert result.outcome.summary == "the key is ***"
    assert secret not in json.dumps(recorder.events)


# --- failures -------------------------------------------------------------------------------


def test_claude_code_error_result_fails_with_the_cli_message(tmp_path: Path) -> None:
    recorded = json.loads(
        (FIXTURES / "claude-code/result.error-during-execution.synthetic.json").read_text()
    )
    stream = jsonl(tmp_path, "error.jsonl", [recorded])

    result, recorder = run(tmp_path, "claude-code", stream, extra_env={"FAKE_CLI_EXIT": "1"})

    outcome = result.outcome
    assert outcome.status == "failed"
    assert outcome.error == "claude-code exited 1: claude ended with error_during_execution"
    assert (outcome.input_tokens, outcome.output_tokens) == (50, 10)
    assert result.cost_usd == 0.005
    assert outcome.findings == []
    assert recorder.kinds() == [
        "agent.capabilities",
        "agent.error",
        "agent.cli_result",
        "agent.capabilities",
    ]
    assert recorder.one("agent.cli_result")["exit_code"] == 1


def test_non_zero_exit_fails_and_names_the_last_output_line(tmp_path: Path) -> None:
    result, recorder = run(
        tmp_path,
        "claude-code",
        FIXTURES / "claude-code/stream-json.text-only.jsonl",
        extra_env={"FAKE_CLI_EXIT": "3", "FAKE_CLI_STDERR": "Error: session store is locked"},
    )

    assert result.outcome.status == "failed"
    assert (
        result.outcome.error == "claude-code exited 3: last output: Error: session store is locked"
    )
    assert result.outcome.findings == []
    assert recorder.one("agent.cli_result")["exit_code"] == 3


def test_cli_without_output_fails_with_its_stderr(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "claude-code", None)  # the fake exits 2 without FAKE_CLI_STREAM

    assert result.outcome.status == "failed"
    assert result.outcome.error == (
        "claude-code exited 2: the stream ended without a result event; "
        "last output: fake claude: FAKE_CLI_STREAM is not set"
    )


@pytest.mark.parametrize(
    ("provider", "binary", "install"),
    [
        ("claude-code", "claude", "npm install -g @anthropic-ai/claude-code"),
        ("codex", "codex", "npm install -g @openai/codex"),
    ],
)
def test_missing_binary_says_how_to_install_it(
    tmp_path: Path, provider: str, binary: str, install: str
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()

    result, recorder = run(tmp_path, provider, None, binary=binary, extra_env={"PATH": str(empty)})

    assert result.outcome.status == "failed"
    assert result.outcome.error == (
        f"{provider} is not installed: `{binary}` not found on PATH; install it ({install}) "
        f"or set ADE_PROVIDERS__{provider.upper().replace('-', '_')}__BINARY to its path"
    )
    assert result.outcome.turns == 0
    assert recorder.kinds() == ["agent.capabilities"]


def test_missing_binary_at_a_path(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere" / "claude")

    result, _ = run(tmp_path, "claude-code", None, binary=missing)

    assert result.outcome.error is not None
    assert result.outcome.error.startswith(f"claude-code is not installed: `{missing}` not found;")


def test_hanging_cli_times_out_and_its_process_group_dies(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    provider = "claude-code"
    stream = jsonl(tmp_path, "partial.jsonl", [{"type": "system", "session_id": "s-9"}])
    started = time.monotonic()

    result, recorder = run(
        tmp_path,
        provider,
        stream,
        timeout=2.0,
        extra_env={"FAKE_CLI_SLEEP": "120", "FAKE_CLI_PID_FILE": str(pid_file)},
    )

    elapsed = time.monotonic() - started
    assert result.outcome.status == "timed_out"
    assert result.outcome.error is not None
    assert result.outcome.error.startswith(f"{provider} was killed at the session's deadline")
    assert 1.5 < elapsed < 15
    cli_result = recorder.one("agent.cli_result")
    assert cli_result["timed_out"] is True
    assert cli_result["exit_code"] is None
    assert cli_result["session_id"] is not None  # what streamed before the hang was kept
    leader, child = (int(pid) for pid in pid_file.read_text().split())
    wait_until(lambda: process_gone(leader) and process_gone(child), 10, "the CLI's group to die")


def test_should_stop_cancels_the_session(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    result, _ = run(
        tmp_path,
        "claude-code",
        jsonl(tmp_path, "partial.jsonl", [{"type": "system", "session_id": "s-9"}]),
        extra_env={"FAKE_CLI_SLEEP": "120", "FAKE_CLI_PID_FILE": str(pid_file)},
        should_stop=pid_file.exists,  # stop once the fake has started hanging
    )

    assert result.outcome.status == "failed"
    assert result.outcome.error == "claude-code was cancelled"
    leader, child = (int(pid) for pid in pid_file.read_text().split())
    wait_until(lambda: process_gone(leader) and process_gone(child), 10, "the CLI's group to die")


def test_passed_deadline_never_starts_the_cli(tmp_path: Path) -> None:
    result, recorder = run(
        tmp_path, "claude-code", FIXTURES / "claude-code/stream-json.text-only.jsonl", timeout=-1
    )

    assert result.outcome.status == "timed_out"
    assert recorder.kinds() == ["agent.capabilities"]
    assert not (tmp_path / "argv.log").exists()


def test_an_http_provider_is_refused_naming_the_cli_agents(tmp_path: Path) -> None:
    known = r"'openai' is not a CLI agent this worker knows \(claude-code, codex\); check the"
    with pytest.raises(NotFoundError, match=known):
        run(tmp_path, "openai", None, binary="claude")


@pytest.mark.parametrize(
    ("subtype", "status"),
    [("error_max_turns", "max_turns"), ("error_max_budget_usd", "cost_budget")],
)
def test_claudes_own_limits_end_the_session_as_the_engines_would(
    tmp_path: Path, subtype: str, status: str
) -> None:
    stream = jsonl(tmp_path, "s.jsonl", [claude_result("", subtype=subtype, is_error=True)])

    result, _ = run(tmp_path, "claude-code", stream, extra_env={"FAKE_CLI_EXIT": "1"})

    assert result.outcome.status == status
    assert result.outcome.error is not None and "reached the session's" in result.outcome.error
