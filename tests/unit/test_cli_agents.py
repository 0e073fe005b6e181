"""CLI agent providers: command lines, capability reports, stream parsers against recorded
streams, fake executables run for real, and the `ade-tasks providers` report."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ade_api.cli import main
from ade_tasks.rules.models import ToolPolicy
from ade_workers.agents.cli_agents import (
    Support,
    Usage,
    capability_report,
    claude_code_argv,
    codex_argv,
    parse_claude_stream,
    parse_codex_stream,
    providers_report,
)
from ade_workers.process import run_process

TESTS = Path(__file__).resolve().parent.parent
FIXTURES = TESTS / "fixtures" / "agents"
FAKE_CLI = TESTS / "fake_cli"
SECRET = "sk-test-must-never-appear-0123456789"


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def kinds(events: list[dict[str, object]]) -> list[object]:
    return [event["kind"] for event in events]


# --- argv ---------------------------------------------------------------------------------


def test_claude_argv_plan_mode_with_tools_and_appended_system_prompt() -> None:
    argv = claude_code_argv(
        "fix the bug",
        model="sonnet",
        max_turns=12,
        permission_mode="plan",
        allowed_tools=["Read", "Bash(git diff:*)"],
        denied_tools=["WebFetch"],
        system="be brief",
        system_mode="append",
    )

    assert argv == [
        "claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "sonnet",
        "--max-turns",
        "12",
        "--permission-mode",
        "plan",
        "--append-system-prompt",
        "be brief",
        "--allowedTools",
        "Read",
        "Bash(git diff:*)",
        "--disallowedTools",
        "WebFetch",
        "--",
        "fix the bug",
    ]


@pytest.mark.parametrize(
    ("mode", "flag"),
    [("plan", "plan"), ("edit", "acceptEdits"), ("full-auto", "bypassPermissions")],
)
def test_claude_argv_maps_each_permission_mode_to_the_help_text_name(mode: str, flag: str) -> None:
    argv = claude_code_argv("p", model="m", max_turns=1, permission_mode=mode)  # type: ignore[arg-type]

    assert argv[argv.index("--permission-mode") + 1] == flag
    assert flag in (FIXTURES / "claude-code" / "cli-help.txt").read_text()


def test_claude_argv_replaces_the_system_prompt_and_omits_empty_tool_lists() -> None:
    argv = claude_code_argv(
        "-starts with a dash",
        model="opus",
        max_turns=3,
        permission_mode="full-auto",
        system="you are a reviewer",
        system_mode="replace",
        binary="/opt/claude",
    )

    assert argv == [
        "/opt/claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "opus",
        "--max-turns",
        "3",
        "--permission-mode",
        "bypassPermissions",
        "--system-prompt",
        "you are a reviewer",
        "--",
        "-starts with a dash",
    ]


def test_claude_argv_flags_exist_in_the_recorded_help_text() -> None:
    help_text = (FIXTURES / "claude-code" / "cli-help.txt").read_text()
    argv = claude_code_argv(
        "p",
        model="m",
        max_turns=1,
        permission_mode="edit",
        allowed_tools=["Read"],
        denied_tools=["Bash"],
        system="s",
    )

    flags = {arg for arg in argv if arg.startswith("-") and arg != "--"}
    # --max-turns is documented in the CLI reference but hidden from `claude --help`.
    assert {flag for flag in flags if flag not in help_text} == {"--max-turns"}


@pytest.mark.parametrize(
    ("mode", "sandbox"),
    [("plan", "read-only"), ("edit", "workspace-write"), ("full-auto", "workspace-write")],
)
def test_codex_argv_per_mode(mode: str, sandbox: str) -> None:
    argv = codex_argv("list files", model="gpt-5-codex", permission_mode=mode)  # type: ignore[arg-type]

    assert argv == [
        "codex",
        "exec",
        "--json",
        "--sandbox",
        sandbox,
        "--model",
        "gpt-5-codex",
        "--",
        "list files",
    ]


# --- capability report --------------------------------------------------------------------


def test_capability_report_lists_every_aspect_even_when_nothing_is_requested() -> None:
    report = capability_report("claude-code", ToolPolicy(), "plan")

    assert [item.aspect for item in report.items] == [
        "permission_mode",
        "max_turns",
        "system_prompt",
        "allowed_tools",
        "denied_tools",
        "fallback",
        "sandbox_root",
    ]
    assert report.get("sandbox_root").support is Support.BEST_EFFORT


def test_fallback_ask_is_unsupported_on_both_clis() -> None:
    policy = ToolPolicy(fallback="ask")

    for cli in ("claude-code", "codex"):
        item = capability_report(cli, policy, "edit").get("fallback")
        assert item.support is Support.UNSUPPORTED
        assert "headless" in item.reason


def test_denied_tools_are_enforced_on_claude_but_not_on_codex() -> None:
    policy = ToolPolicy(allowed_tools=["Read"], denied_tools=["Bash"])

    claude = capability_report("claude-code", policy, "edit")
    codex_edit = capability_report("codex", policy, "edit")
    codex_plan = capability_report("codex", policy, "plan")

    assert claude.get("denied_tools").support is Support.ENFORCED
    assert "--disallowedTools" in claude.get("denied_tools").reason
    assert codex_edit.get("denied_tools").support is Support.UNSUPPORTED
    assert codex_plan.get("denied_tools").support is Support.BEST_EFFORT
    assert codex_edit.get("allowed_tools").support is Support.UNSUPPORTED


def test_full_auto_downgrades_are_reported_not_hidden() -> None:
    policy = ToolPolicy(allowed_tools=["Read"], fallback="deny")

    claude = capability_report("claude-code", policy, "full-auto")
    codex = capability_report("codex", policy, "full-auto", system="be brief")

    assert claude.get("allowed_tools").support is Support.BEST_EFFORT
    assert claude.get("fallback").support is Support.UNSUPPORTED
    assert codex.get("permission_mode").support is Support.BEST_EFFORT
    assert codex.get("system_prompt").support is Support.UNSUPPORTED
    assert codex.get("max_turns").support is Support.UNSUPPORTED
    assert {item.aspect for item in codex.downgrades} >= {"max_turns", "system_prompt", "fallback"}
    assert codex.as_dict()["items"][0] == {
        "aspect": "permission_mode",
        "support": "best-effort",
        "reason": codex.get("permission_mode").reason,
    }


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


# --- codex stream -------------------------------------------------------------------------


def test_codex_docs_sample_stream() -> None:
    transcript = parse_codex_stream(lines_of(FIXTURES / "codex/exec-json.docs-sample.jsonl"))

    assert kinds(transcript.events) == [
        "agent.reasoning",
        "agent.tool_call",
        "agent.tool_result",
        "agent.reasoning",
        "agent.message",
    ]
    call, result = transcript.events[1:3]
    assert call["data"] == {
        "id": "item_1",
        "name": "command_execution",
        "input": {"command": "bash -lc ls"},
    }
    assert result["data"]["exit_code"] == 0
    assert "README.md\n" in result["data"]["output"]
    assert transcript.final_text == "Yep \u2014 there\u2019s a `README.md` in the repository root."
    assert transcript.usage == Usage(
        input_tokens=24763, output_tokens=122, cached_input_tokens=24448
    )
    assert transcript.cost_usd is None
    assert transcript.session_id == "0199a213-81c0-7800-8aa1-bbab2a035a53"
    assert transcript.ok


def test_codex_text_only_stream() -> None:
    transcript = parse_codex_stream(lines_of(FIXTURES / "codex/exec-json.text-only.jsonl"))

    assert kinds(transcript.events) == ["agent.reasoning", "agent.message"]
    assert transcript.final_text == "4"
    assert transcript.usage == Usage(input_tokens=2946, output_tokens=7)
    assert transcript.ok


def test_codex_command_execution_stream() -> None:
    transcript = parse_codex_stream(lines_of(FIXTURES / "codex/exec-json.command-execution.jsonl"))

    tool_events = [e for e in transcript.events if e["kind"].startswith("agent.tool")]
    assert [e["data"]["name"] for e in tool_events if e["kind"] == "agent.tool_call"] == [
        "command_execution"
    ]
    assert tool_events[-1]["data"]["output"] == (
        "stream-output-1.jsonl\nstream-output-2.jsonl\ntest.js\n"
    )
    assert transcript.final_text == (
        "Files here: `stream-output-1.jsonl`, `stream-output-2.jsonl`, `test.js`."
    )
    assert transcript.usage == Usage(input_tokens=6040, output_tokens=129, cached_input_tokens=4992)


def test_codex_file_change_stream() -> None:
    transcript = parse_codex_stream(lines_of(FIXTURES / "codex/exec-json.file-change.jsonl"))

    call = next(e for e in transcript.events if e["kind"] == "agent.tool_call")
    assert call["data"] == {
        "id": "item_1",
        "name": "file_change",
        "input": {
            "changes": [{"path": "/private/tmp/codex-research-test/hello.txt", "kind": "add"}]
        },
    }
    assert transcript.final_text == "Created `hello.txt` containing `Hello from Codex`."
    assert transcript.ok


def test_codex_incomplete_stream_is_an_error() -> None:
    transcript = parse_codex_stream(lines_of(FIXTURES / "codex/exec-json.incomplete.jsonl"))

    assert transcript.session_id == "019a2d7b-c0ed-75a0-8908-de832785d47f"
    assert transcript.errors == ["the stream ended without turn.completed (truncated)"]
    assert not transcript.ok


def test_codex_turn_failed_malformed_line_and_unknown_event() -> None:
    lines = [
        *lines_of(FIXTURES / "codex/exec-json.incomplete.jsonl"),
        "{not json",
        '{"type": "thread.mystery"}',
        '{"type": "turn.failed", "error": {"message": "model overloaded"}}',
    ]

    transcript = parse_codex_stream(lines)

    assert kinds(transcript.events) == ["agent.error", "agent.unknown", "agent.error"]
    assert transcript.events[0]["data"]["line"] == 3
    assert transcript.errors[-1] == "codex turn.failed: model overloaded"
    assert not transcript.ok


# --- fake executables run for real ----------------------------------------------------------


@pytest.mark.parametrize(
    ("binary", "fixture", "argv_for", "parse", "final"),
    [
        (
            "claude",
            "claude-code/stream-json.tool-use.jsonl",
            lambda b: claude_code_argv(
                "list files", model="m", max_turns=2, permission_mode="edit", binary=b
            ),
            parse_claude_stream,
            "Here are the files in the current directory.",
        ),
        (
            "codex",
            "codex/exec-json.command-execution.jsonl",
            lambda b: codex_argv("list files", model="m", permission_mode="plan", binary=b),
            parse_codex_stream,
            "Files here: `stream-output-1.jsonl`, `stream-output-2.jsonl`, `test.js`.",
        ),
    ],
)
def test_fake_cli_runs_through_run_process(
    tmp_path: Path, binary: str, fixture: str, argv_for: object, parse: object, final: str
) -> None:
    argv_log = tmp_path / "argv.log"
    env = {
        **os.environ,
        "FAKE_CLI_STREAM": str(FIXTURES / fixture),
        "FAKE_CLI_ARGV_LOG": str(argv_log),
    }
    argv = argv_for(str(FAKE_CLI / binary))  # type: ignore[operator]

    result = run_process(argv, cwd=tmp_path, env=env, timeout=30)
    transcript = parse(result.output.splitlines())  # type: ignore[operator]

    assert result.exit_code == 0
    assert transcript.ok
    assert transcript.final_text == final
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

    result = CliRunner().invoke(main, ["providers", "--json"])

    assert result.exit_code == 0, result.output
    data = {item["name"]: item for item in json.loads(result.output)}
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

    result = CliRunner().invoke(main, ["providers"])

    assert result.exit_code == 0, result.output
    assert "fix: npm install -g @openai/codex" in result.output
    assert "fix: export ADE_PROVIDERS__CLAUDE_CODE__API_KEY=..." in result.output
