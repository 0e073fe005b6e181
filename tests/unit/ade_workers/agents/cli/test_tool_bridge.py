"""The engine's tools for Claude Code without the CLI: the judge's tickets for `mcp__ade__*`
calls, the worker's bridge that runs only a ticketed call once, and the sandbox's MCP helper
speaking MCP's stdio transport to it (`tool_bridge.py`, `mcp_bridge.py`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ade_tasks.agents.policy import Policy
from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.db.approvals import ToolDecisions
from ade_tasks.rules.agent import AgentSession, ToolPolicy
from ade_workers.agents.cli import mcp_bridge
from ade_workers.agents.cli.claude_calls import CallJudge, engine_name
from ade_workers.agents.cli.claude_session import _settings_checked, capabilities
from ade_workers.agents.cli.tool_bridge import ToolBridge
from ade_workers.agents.tools.tool import ToolContext
from tests.unit.ade_tasks.rules.providers.test_codex import setup_for

NONE = ToolDecisions(frozenset(), frozenset(), frozenset())
TOOLS = ("github_pr", "github_comment")


def _judge(tmp_path: Path, mode: str = "edit", tainted: bool = False, **policy: Any) -> CallJudge:
    return CallJudge(
        policy=Policy.from_rule(ToolPolicy(**policy), mode),  # type: ignore[arg-type]
        tainted=tainted,
        worktree=tmp_path,
        protected=ProtectedPaths.for_worktree(tmp_path),
        decisions=NONE,
        record=lambda kind, data: None,
        on_ask=lambda pending: None,
        bridged=frozenset(TOOLS),
    )


def _pre(name: str, cli_id: str, **tool_input: Any) -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "tool_name": name,
        "tool_input": tool_input,
        "tool_use_id": cli_id,
    }


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[tuple[CallJudge, Any, list[tuple[str, Any]]]]:
    judge, events = _judge(tmp_path), []
    # No run link: a tool that runs answers "no GitHub access", a refused call never gets there.
    ctx = ToolContext(worktree=tmp_path, env={})
    path = tmp_path / "tools.sock"
    record = lambda kind, data: events.append((kind, data))  # noqa: E731
    with ToolBridge(path, TOOLS, ctx, judge.tickets, record):
        helper = subprocess.Popen(
            [sys.executable, "-I", "-S", mcp_bridge.__file__, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            yield judge, helper, events
        finally:
            assert helper.stdin is not None
            helper.stdin.close()
            helper.wait(10)


def _rpc(helper: Any, ident: int, method: str, **params: Any) -> dict[str, Any]:
    helper.stdin.write(
        json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}) + "\n"
    )
    helper.stdin.flush()
    reply = json.loads(helper.stdout.readline())
    assert reply["id"] == ident
    return reply


def _call(helper: Any, ident: int, cli_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    meta = {"claudecode/toolUseId": cli_id}
    return _rpc(helper, ident, "tools/call", name=name, arguments=arguments, _meta=meta)["result"]


def test_the_engines_server_names_map_onto_engine_tools() -> None:
    assert engine_name("mcp__ade__github_comment") == "github_comment"
    assert engine_name("mcp__ade__rm_rf") == "mcp:ade:rm_rf"  # not an engine tool
    assert engine_name("mcp__other__github_comment") == "mcp:other:github_comment"


def test_the_helper_speaks_mcp_and_runs_only_an_allowed_call_once(bridge: Any) -> None:
    judge, helper, events = bridge
    init = _rpc(helper, 1, "initialize", protocolVersion="2025-03-26", capabilities={})
    assert init["result"]["protocolVersion"] == "2025-03-26"
    assert init["result"]["serverInfo"]["name"] == "ade"
    listed = _rpc(helper, 2, "tools/list")["result"]["tools"]
    assert [t["name"] for t in listed] == list(TOOLS) and listed[1]["inputSchema"]["required"]
    assert _rpc(helper, 3, "resources/list")["error"]["code"] == -32601

    unasked = _call(helper, 4, "toolu_1", "github_pr")
    assert (
        unasked["isError"] and "no decision of the engine allowed" in unasked["content"][0]["text"]
    )
    assert judge(_pre("mcp__ade__github_pr", "toolu_1"))[0] == "allow"
    other = _call(helper, 5, "toolu_1", "github_comment", body="x")
    assert "not the call the engine allowed" in other["content"][0]["text"]
    ran = _call(helper, 6, "toolu_1", "github_pr")
    assert ran["isError"] and "no GitHub access" in ran["content"][0]["text"]  # it ran
    again = _call(helper, 7, "toolu_1", "github_pr")
    assert "or it already ran" in again["content"][0]["text"]
    assert [kind for kind, _ in events] == ["agent.refused", "agent.refused", "agent.refused"]


@pytest.mark.parametrize(
    ("mode", "tainted", "policy", "tool", "why"),
    [
        ("plan", False, {}, "mcp__ade__github_comment", "plan mode does not permit it"),
        ("edit", True, {}, "mcp__ade__github_comment", "outsiders' text"),
        ("edit", False, {"denied_tools": ["github_comment"]}, "mcp__ade__github_comment", "denied"),
        ("edit", False, {}, "mcp__ade__github_push", "not a tool of this session"),
        ("edit", False, {"fallback": "ask"}, "mcp__ade__github_comment", "must approve"),
    ],
)
def test_a_call_the_judge_does_not_allow_gets_no_ticket(
    tmp_path: Path, mode: str, tainted: bool, policy: dict[str, Any], tool: str, why: str
) -> None:
    judge = _judge(tmp_path, mode, tainted, **policy)
    verdict, reason = judge(_pre(tool, "toolu_9", body="x"))
    assert verdict == "deny" and why in reason
    assert judge.tickets.take("toolu_9", tool, {"body": "x"}) is not None


def test_the_capability_report_accepts_only_the_engines_own_mcp_server() -> None:
    ade = [{"name": "ade", "status": "connected"}]
    assert _settings_checked(ade, bridged=True).support == "enforced"
    assert _settings_checked(ade, bridged=False).support == "unsupported"
    assert _settings_checked([*ade, {"name": "evil"}], bridged=True).support == "unsupported"


def test_the_report_lists_the_bridged_tools_and_says_when_their_token_is_within_reach(
    tmp_path: Path,
) -> None:
    base = setup_for(tmp_path, "edit", ["read_file", "github_pr", "github_comment"])
    execution = AgentSession(provider="claude-code", model="m", prompt="p")
    without = {i.aspect: i for i in capabilities(base, execution, None).items}
    assert "engine_tools" not in without  # no context to run them in: no MCP server
    setup = replace(base, tool_ctx=ToolContext(worktree=base.worktree, env={}))
    items = {i.aspect: i for i in capabilities(setup, execution, None).items}
    assert "mcp__ade__github_pr, mcp__ade__github_comment" in items["engine_tools"].reason
    # ADE_SANDBOX=off and no agent user: the CLI's commands run as the worker
    assert items["engine_tools"].support == "best-effort"
