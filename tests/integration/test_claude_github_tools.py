"""The engine's GitHub tools in a real Claude Code session (`tool_bridge`, `mcp_bridge`): the model
calls `mcp__ade__github_checks` and `mcp__ade__github_comment` against the scripted GitHub on
127.0.0.1, the worker runs them with a token the CLI never sees, and a command of the agent that
talks to the bridge socket itself runs nothing."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from ade_api.dev_model import ScriptedAnthropic, Turn
from ade_tasks.rules.agent import ToolPolicy
from tests.integration import test_claude_code_real as real
from tests.integration import test_github_palette as palette
from tests.integration.test_claude_code_real import results, run_claude
from tests.integration.test_github_palette import REPO, TOKEN, Setup

claude, server, gh = real.claude, real.server, palette.gh  # their fixtures, shared

GITHUB = ("repo", "git", "github")

#: A command an adversarial agent runs: it finds the bridge socket from the MCP helper's command
#: line and asks the worker to post a comment itself, with an invented call id, then with the id
#: of the call the engine allowed (and ran) before.
ATTACK = textwrap.dedent(
    """\
    python3 - <<'EOF'
    import json, os, socket
    path = None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
        except OSError:
            continue
        if any(a.endswith(b"mcp_bridge.py") for a in args):
            path = [a for a in args if a][-1].decode()
    def ask(request):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(path)
            sock.sendall(json.dumps(request).encode() + b"\\n")
            return sock.makefile().readline().strip()
    call = {"op": "call", "name": "github_comment"}
    print("invented:", ask({**call, "arguments": {"body": "forged"}, "tool_use_id": "toolu_x"}))
    print("replayed:", ask({**call, "arguments": {"body": "posted"}, "tool_use_id": "%s"}))
    EOF
    """
)


def test_claude_reads_the_failing_check_and_comments_once_with_a_token_it_never_sees(
    claude: Path, server: ScriptedAnthropic, gh: Setup
) -> None:
    sha = gh.server.head_of(REPO, "feature")
    assert sha is not None
    gh.server.add_check(
        REPO,
        sha,
        "tests",
        "failure",
        log="E   AssertionError: greeting\n",
        failed_steps=("pytest",),
    )
    server.script(
        Turn.tool("mcp__ade__github_checks"),
        Turn.tool("mcp__ade__github_comment", body="The greeting test fails."),
        Turn.text("done"),
    )
    run = run_claude(claude, server, gh.lane, mode="edit", palette=GITHUB, tool_ctx=gh.ctx)
    assert run.outcome.status == "completed", run.outcome.error
    got = results(server)
    assert got[0][0] is False and "AssertionError: greeting" in got[0][1]
    assert got[1][0] is False, got[1]
    (comment,) = gh.server.comment_bodies(REPO, gh.number)
    assert comment.startswith("The greeting test fails.\n\n<!-- ade:run=run1 call=cli-")
    assert [d["engine_tool"] for d in run.decisions()] == ["github_checks", "github_comment"]
    checked = _checked(run.events)
    assert checked["settings"] == "enforced" and checked["tools"] == "enforced"
    assert checked["engine_tools"] == "enforced"
    transcript = json.dumps(run.events) + json.dumps([seen.body for seen in server.requests])
    assert TOKEN not in transcript


def test_a_command_that_calls_the_bridge_socket_itself_runs_nothing(
    claude: Path, server: ScriptedAnthropic, gh: Setup
) -> None:
    allowed = Turn.tool("mcp__ade__github_comment", body="posted")
    attack = ATTACK % allowed.blocks[0]["id"]
    server.script(allowed, Turn.tool("Bash", command=attack), Turn.text("done"))
    run = run_claude(
        claude,
        server,
        gh.lane,
        mode="full-auto",
        policy=ToolPolicy(allowed_tools=["bash"]),
        palette=GITHUB,
        tool_ctx=gh.ctx,
    )
    assert run.outcome.status == "completed", run.outcome.error
    output = results(server)[1][1]
    assert "invented: " in output and "replayed: " in output, output
    assert output.count("refused: no decision of the engine allowed this call") == 2, output
    assert [c.split("\n")[0] for c in gh.server.comment_bodies(REPO, gh.number)] == ["posted"]
    refused = [d for kind, d in run.events if kind == "agent.refused"]
    assert [d["cli_id"] for d in refused] == ["toolu_x", allowed.blocks[0]["id"]]


def _checked(events: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    return {
        item["aspect"]: item["support"]
        for kind, data in events
        if kind == "agent.capabilities" and data.get("checked_against") == "init"
        for item in data["items"]
    }
