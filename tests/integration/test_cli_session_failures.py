"""CLI agent sessions that fail, with a fake `claude` that errs, exits non-zero, prints nothing,
is missing, hangs or is stopped: each ends with a clear error and no process left behind.

The real CLIs are driven in test_claude_code_real.py and test_codex_real.py. No services needed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ade_tasks.errors import NotFoundError
from tests.integration.cli_session_support import FIXTURES, claude_result, jsonl, process_gone, run
from tests.support import wait_until


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
