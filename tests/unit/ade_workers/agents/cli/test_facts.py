"""CLI agent providers: Claude's stream parser against recorded streams, a fake executable run
for real, and the `ade-tasks providers` report."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ade_api.cli import main
from ade_workers.agents.cli.facts import Usage, parse_claude_stream
from ade_workers.agents.readiness import providers_report
from ade_workers.containment.process import run_process

TESTS = Path(__file__).resolve().parents[4]
FIXTURES = TESTS / "fixtures" / "agents"
FAKE_CLI = TESTS / "fake_cli"
SECRET = "sk-test-must-never-appear-0123456789"


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def kinds(events: list[dict[str, object]]) -> list[object]:
    return [event["kind"] for event in events]


# --- claude stream ------------------------------------------------------------------------


def test_claude_tool_use_stream() -> None:
    transcript = parse_claude_stream(lines_of(FIXTURES / "claude-code/stream-json.tool-use.jsonl"))

    assert kinds(transcript.events) == ["agent.tool_call", "agent.tool_result"]
    call, result = transcript.events
    assert call["data"] == {
        "id": "toolu_01BeipFBP3sUY3EAwVg3qQnE",
        "name": "Bash",
        "input": {"command": "ls -la", "description": "List files in current directory"},
    }
    assert result["data"]["id"] == "toolu_01BeipFBP3sUY3EAwVg3qQnE"
    assert result["data"]["output"].startswith("total 1976\n")
    assert result["data"]["is_error"] is False
    assert transcript.final_text == "Here are the files in the current directory."
    assert transcript.usage == Usage(input_tokens=18, output_tokens=424, cached_input_tokens=17254)
    assert transcript.cost_usd == 0.24722425
    assert transcript.permission_denials == []
    assert transcript.session_id == "40e7b02d-c0f9-4876-9010-f514d4eb0603"
    assert transcript.ok


def test_claude_text_only_stream() -> None:
    transcript = parse_claude_stream(lines_of(FIXTURES / "claude-code/stream-json.text-only.jsonl"))

    assert transcript.events == [{"kind": "agent.message", "data": {"text": "4"}}]
    assert transcript.final_text == "4"
    assert transcript.usage == Usage(input_tokens=10, output_tokens=25)
    assert transcript.cost_usd == 0.1354875
    assert transcript.ok


def test_claude_error_result_is_an_error() -> None:
    result = json.loads(
        (FIXTURES / "claude-code/result.error-during-execution.synthetic.json").read_text()
    )

    transcript = parse_claude_stream([json.dumps(result)])

    assert not transcript.ok
    assert transcript.errors == ["claude ended with error_during_execution"]
    assert transcript.events[-1]["kind"] == "agent.error"
    assert transcript.usage == Usage(input_tokens=50, output_tokens=10)
    assert transcript.cost_usd == 0.005


def test_claude_malformed_line_and_unknown_event_do_not_crash() -> None:
    lines = lines_of(FIXTURES / "claude-code/stream-json.text-only.jsonl")
    lines.insert(1, "npm WARN something went sideways")
    lines.insert(2, '{"type": "stream_event", "event": {"type": "ping"}}')

    transcript = parse_claude_stream(lines)

    assert kinds(transcript.events) == ["agent.error", "agent.unknown", "agent.message"]
    assert transcript.events[0]["data"]["line"] == 2
    assert transcript.events[0]["data"]["message"].startswith("line 2: not a JSON object")
    assert transcript.events[1]["data"]["type"] == "stream_event"
    assert transcript.final_text == "4"
    assert transcript.completed
    assert not transcript.ok


def test_claude_stream_without_result_is_truncated() -> None:
    lines = lines_of(FIXTURES / "claude-code/stream-json.text-only.jsonl")[:2]

    transcript = parse_claude_stream(lines)

    assert transcript.errors == ["the stream ended without a result event"]
    assert not transcript.completed


# --- fake executables run for real ----------------------------------------------------------


def test_fake_claude_runs_through_run_process(tmp_path: Path) -> None:
    argv_log = tmp_path / "argv.log"
    env = {
        **os.environ,
        "FAKE_CLI_STREAM": str(FIXTURES / "claude-code/stream-json.tool-use.jsonl"),
        "FAKE_CLI_ARGV_LOG": str(argv_log),
    }
    argv = [str(FAKE_CLI / "claude"), "-p", "--output-format", "stream-json", "--", "list files"]

    result = run_process(argv, cwd=tmp_path, env=env, timeout=30)
    transcript = parse_claude_stream(result.output.splitlines())

    assert result.exit_code == 0
    assert transcript.ok
    assert transcript.final_text == "Here are the files in the current directory."
    assert json.loads(argv_log.read_text()) == argv[1:]


# --- providers report ---------------------------------------------------------------------


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    for name in ("claude", "codex"):
        shutil.copy2(FAKE_CLI / name, directory / name)
    return directory


def test_providers_report_without_keys_says_how_to_fix(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": str(tmp_path / "empty"), "HOME": str(home)}

    report = {s.name: s for s in providers_report(env)}

    assert not any(status.ready for status in report.values())
    assert report["openai"].base_url == "https://api.openai.com/v1"
    assert report["claude-code"].binary is None
    assert report["claude-code"].fixes == (
        "npm install -g @anthropic-ai/claude-code",
        "export ADE_PROVIDERS__CLAUDE_CODE__API_KEY=... (it reaches only the engine's proxy)",
    )
    assert report["codex"].fixes == (
        "npm install -g @openai/codex",
        "export ADE_PROVIDERS__CODEX__API_KEY=... (it reaches only the engine's proxy)",
    )


def test_providers_report_with_keys_and_installed_clis_names_sources_only(
    tmp_path: Path, fake_bin: Path
) -> None:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "auth.json").write_text(json.dumps({"token": SECRET}))
    env = {
        "PATH": str(fake_bin),
        "HOME": str(home),
        "ADE_PROVIDERS__OPENAI__API_KEY": SECRET,
        "ANTHROPIC_API_KEY": SECRET,
        "ANTHROPIC_BASE_URL": "https://proxy.example/anthropic",
        "ADE_PROVIDERS__CLAUDE_CODE__API_KEY": SECRET,
        "ADE_PROVIDERS__CLAUDE_CODE__BASE_URL": "http://127.0.0.1:9/anthropic",
        "ADE_PROVIDERS__CODEX__API_KEY": SECRET,
    }

    report = {s.name: s for s in providers_report(env)}

    assert report["openai"].credentials == "ADE_PROVIDERS__OPENAI__API_KEY"
    assert report["anthropic"].base_url == "https://proxy.example/anthropic"
    assert report["claude-code"].binary == str(fake_bin / "claude")
    assert report["claude-code"].version == "2.1.7 (Claude Code)"
    assert report["claude-code"].credentials == "ADE_PROVIDERS__CLAUDE_CODE__API_KEY"
    assert report["claude-code"].base_url == "http://127.0.0.1:9/anthropic"
    assert report["codex"].version == "codex-cli 0.46.0"
    assert report["codex"].credentials == "ADE_PROVIDERS__CODEX__API_KEY"
    assert all(status.ready and not status.fixes for status in report.values())
    assert SECRET not in json.dumps([s.as_dict() for s in report.values()])


def test_a_cli_login_of_the_worker_user_does_not_make_a_cli_ready(
    tmp_path: Path, fake_bin: Path
) -> None:
    # Sessions run with a private home behind the engine's proxy: ~/.claude is never read.
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text("{}")
    env = {"PATH": str(fake_bin), "HOME": str(home), "ANTHROPIC_API_KEY": SECRET}

    report = {s.name: s for s in providers_report(env)}

    assert report["claude-code"].credentials is None
    assert not report["claude-code"].ready


def test_providers_command_prints_json(
    tmp_path: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("CLAUDE_CODE_OAUTH_TOKEN", raising=False)

    result = CliRunner().invoke(main, ["providers", "--json", "--local"])  # no API asked

    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert (shown["cluster"], shown["cluster_error"]) == (None, "not asked (--local)")
    data = {item["name"]: item for item in shown["local"]}
    assert data["openai"]["credentials"] == "OPENAI_API_KEY"
    assert data["codex"]["binary"] == str(fake_bin / "codex")
    assert data["codex"]["credentials"] is None  # the CLI's own variable is not the engine's
    assert data["claude-code"]["fixes"] == [
        "export ADE_PROVIDERS__CLAUDE_CODE__API_KEY=... (it reaches only the engine's proxy)"
    ]
    assert SECRET not in result.output


def test_providers_command_prints_a_table_with_fixes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)

    result = CliRunner().invoke(main, ["providers", "--local"])

    assert result.exit_code == 0, result.output
    assert result.output.startswith("this shell")
    assert "fix: npm install -g @openai/codex" in result.output
    assert "fix: export ADE_PROVIDERS__CLAUDE_CODE__API_KEY=..." in result.output
