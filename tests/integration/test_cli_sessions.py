"""CLI agent sessions run for real with a fake `claude` that replays recorded streams:
`run_cli_session` turns them into run events and a `SessionOutcome` (findings, noise on stderr,
masked secrets, the replace-system mode).

The real CLIs are driven in test_claude_code_real.py and test_codex_real.py. No services needed.
"""

from __future__ import annotations

import json
from pathlib import Path

from ade_tasks.secrets import Masker
from ade_workers.agents.cli.outcome import REPORT_INSTRUCTION
from tests.integration.cli_session_support import (
    FIXTURES,
    REPORT_TEXT,
    claude_result,
    jsonl,
    logged_argv,
    run,
)


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
