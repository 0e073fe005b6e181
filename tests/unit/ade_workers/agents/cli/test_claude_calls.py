"""The engine's side of a Claude Code session without the CLI: how a call is judged, the
decision socket and its hook program (fail closed), and the model proxy (key swap, metering)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from ade_api.dev_model import ScriptedAnthropic, Turn
from ade_tasks.agents.policy import Policy
from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.db.approvals import ToolDecisions
from ade_tasks.rules.agent import ToolPolicy
from ade_workers.actions.agent_session import interrupted_note
from ade_workers.agents.cli import claude_hook
from ade_workers.agents.cli.claude_calls import CallJudge, call_paths, engine_name
from ade_workers.agents.cli.decision_server import DecisionServer
from ade_workers.agents.cli.model_proxy import ModelProxy, UsageReader
from ade_workers.agents.cli.setup import call_id, completed_calls

NONE = ToolDecisions(frozenset(), frozenset(), frozenset())


def judge(tmp_path: Path, mode: str = "edit", **policy: Any) -> tuple[CallJudge, list[Any]]:
    asked: list[Any] = []
    worktree = tmp_path / "wt"
    worktree.mkdir(exist_ok=True)
    return (
        CallJudge(
            policy=Policy.from_rule(ToolPolicy(**policy), mode),  # type: ignore[arg-type]
            tainted=False,
            worktree=worktree,
            protected=ProtectedPaths.for_worktree(worktree),
            decisions=NONE,
            record=lambda kind, data: None,
            on_ask=asked.append,
        ),
        asked,
    )


def call(name: str, **tool_input: Any) -> dict[str, Any]:
    return {"tool_name": name, "tool_input": tool_input, "tool_use_id": "toolu_1"}


def test_claude_tools_map_onto_the_engines_names_and_paths() -> None:
    assert engine_name("Read") == "read_file" and engine_name("MultiEdit") == "edit_file"
    assert engine_name("mcp__github__create_issue") == "mcp:github:create_issue"
    assert engine_name("WebFetch") == "WebFetch"
    assert call_paths("Glob", {"pattern": "/etc/*", "path": "src"}) == ["src", "/etc/*"]
    assert call_paths("Glob", {"pattern": "**/*.py"}) == []
    assert call_paths("Bash", {"command": "cat /etc/passwd"}) == []
    assert call_id("Bash", {"command": "ls"}) == call_id("Bash", {"command": "ls"})
    assert call_id("Bash", {"command": "ls"}) != call_id("Bash", {"command": "ls -a"})


def test_edit_mode_asks_for_bash_once_and_denies_the_call_while_it_waits(tmp_path: Path) -> None:
    decide, asked = judge(tmp_path, "edit")

    first = decide(call("Bash", command="make"))
    second = decide(call("Bash", command="make test"))

    assert first[0] == "deny" and "an operator must approve" in first[1]
    assert second[0] == "deny"
    assert [a["tool"] for a in asked] == ["Bash"]  # the first ask parks the run


def test_plan_mode_refuses_writes_and_foreign_tools_need_allowed_tools(tmp_path: Path) -> None:
    decide, _ = judge(tmp_path, "plan")
    assert decide(call("Write", file_path="x.txt", content=""))[0] == "deny"
    assert decide(call("WebFetch", url="http://127.0.0.1"))[0] == "deny"
    allowed, _ = judge(tmp_path, "plan", allowed_tools=["WebFetch"])
    assert allowed(call("WebFetch", url="http://127.0.0.1"))[0] == "allow"


def test_the_engines_data_is_refused_whatever_the_policy(tmp_path: Path) -> None:
    decide, _ = judge(tmp_path, "full-auto", fallback="allow")
    (tmp_path / "wt" / ".ade").mkdir()
    verdict, reason = decide(call("Read", file_path=str(tmp_path / "wt" / ".ade" / "api-token")))
    assert verdict == "deny" and "engine" in reason
    assert decide(call("Write", file_path=".git/config", content=""))[0] == "deny"


def test_the_hook_prints_the_workers_verdict(tmp_path: Path) -> None:
    socket_path = tmp_path / "d.sock"
    with DecisionServer(socket_path, lambda c: ("deny", f"no {c['tool_name']}")):
        done = run_hook(socket_path, call("Bash", command="ls"))
    assert done.returncode == 0
    output = json.loads(done.stdout)["hookSpecificOutput"]
    assert output == {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "no Bash",
    }


def test_the_hook_fails_closed_without_a_worker_or_with_a_broken_judge(tmp_path: Path) -> None:
    missing = run_hook(tmp_path / "nobody.sock", call("Bash", command="ls"))
    assert missing.returncode == 2 and "it is refused" in missing.stderr

    def broken(_: dict[str, Any]) -> tuple[str, str]:
        raise RuntimeError("bug")

    with DecisionServer(tmp_path / "b.sock", broken):
        done = run_hook(tmp_path / "b.sock", call("Bash", command="ls"))
    output = json.loads(done.stdout)["hookSpecificOutput"]
    assert (
        output["permissionDecision"] == "deny"
        and "failed to decide" in output["permissionDecisionReason"]
    )


def run_hook(socket_path: Path, payload: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-S", claude_hook.__file__, str(socket_path)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_proxy_swaps_the_token_for_the_key_and_meters_the_stream() -> None:
    spent: list[tuple[int, int]] = []

    def meter(i: int, o: int) -> str | None:
        spent.append((i, o))
        return "over" if len(spent) >= 2 else None

    with ScriptedAnthropic() as upstream:
        upstream.script(Turn.text("one", input_tokens=7, output_tokens=3))
        with ModelProxy(
            upstream=upstream.url, api_key="sk-real", style="anthropic", meter=meter
        ) as proxy:
            body = {"model": "m", "stream": True, "tools": [{"name": "x"}], "messages": []}
            with httpx.Client() as client:
                bad = client.post(
                    f"{proxy.url}/v1/messages", json=body, headers={"x-api-key": "no"}
                )
                ok = client.post(
                    f"{proxy.url}/v1/messages", json=body, headers={"x-api-key": proxy.token}
                )
                again = client.post(
                    f"{proxy.url}/v1/messages", json=body, headers={"x-api-key": proxy.token}
                )
                refused = client.post(
                    f"{proxy.url}/v1/messages", json=body, headers={"x-api-key": proxy.token}
                )
    assert bad.status_code == 401
    assert ok.status_code == 200 and "event: message_start" in ok.text
    assert again.status_code == 200
    assert refused.status_code == 400 and "stopped the session: over" in refused.text
    assert spent[0] == (7, 3)
    # Only this test's requests: on a busy machine a stray request from an earlier test's
    # client can reach a port the kernel handed out again.
    ours = [seen for seen in upstream.requests if seen.body == body]
    assert [seen.headers.get("x-api-key") for seen in ours] == ["sk-real", "sk-real"]
    assert len(upstream.requests) == 2


@pytest.mark.parametrize(
    ("style", "streaming", "chunks", "expected"),
    [
        (
            "anthropic",
            False,
            [b'{"type":"message","usage":{"input_tokens":5,"output_tokens":2}}'],
            (5, 2),
        ),
        (
            "openai",
            True,
            [
                b'data: {"type":"response.created"}\n\n',
                b'data: {"type":"response.completed",',
                b'"response":{"usage":{"input_tokens":9,"output_tokens":4}}}\n\n',
            ],
            (9, 4),
        ),
    ],
)
def test_usage_is_read_from_json_and_split_sse_chunks(
    style: Any, streaming: bool, chunks: list[bytes], expected: tuple[int, int]
) -> None:
    reader = UsageReader(style, streaming)
    for chunk in chunks:
        reader.feed(chunk)
    reader.close()
    assert (reader.input_tokens, reader.output_tokens) == expected


def test_a_fresh_cli_session_is_told_which_calls_an_interrupted_attempt_made() -> None:
    allowed = {"tool": "Bash", "input": {"command": "make deploy"}, "verdict": "allow"}
    denied = {"tool": "Bash", "input": {"command": "rm -rf /"}, "verdict": "deny"}
    finished = [("agent.tool_decision", allowed), ("agent.cli_result", {"exit_code": 0})]
    interrupted = [*finished, ("agent.tool_decision", allowed), ("agent.tool_decision", denied)]

    assert interrupted_note([]) == ""
    assert interrupted_note(finished) == ""  # that attempt ended: its calls are in its transcript
    note = interrupted_note(interrupted)
    assert "interrupted when its worker stopped" in note
    assert 'Bash {"command": "make deploy"}' in note and "rm -rf" not in note


def test_a_resumed_session_is_told_the_recorded_results_of_the_calls_that_finished() -> None:
    counted = {"id": "cli-1", "tool": "bash", "input": {"command": "echo once >> n"}}
    deploy = {"id": "cli-2", "tool": "bash", "input": {"command": "make deploy"}}
    history = [
        ("agent.tool_decision", {**counted, "verdict": "allow"}),
        ("agent.tool_completed", {"id": "cli-1", "tool": "bash", "output": "counted: 1"}),
        ("agent.tool_decision", {**deploy, "verdict": "allow"}),
    ]
    note = interrupted_note(history)
    finished, unknown = note.split("unknown:")
    assert "will not run them again" in finished and "result: counted: 1" in finished
    assert "echo once" in finished and "make deploy" in unknown and "echo once" not in unknown


@pytest.mark.parametrize(
    "path", ["@127.0.0.1:9/steal", "//127.0.0.1:9/x", "/v1/files", "/v1/messages/batches"]
)
def test_the_proxy_forwards_only_model_calls_to_the_provider(path: str) -> None:
    with ScriptedAnthropic() as upstream:
        with ModelProxy(
            upstream=upstream.url, api_key="sk-real", style="anthropic", meter=lambda i, o: None
        ) as proxy:
            port = int(proxy.url.rsplit(":", 1)[1])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.putrequest("POST", path, skip_host=True)
            conn.putheader("host", "127.0.0.1")
            conn.putheader("x-api-key", proxy.token)
            conn.putheader("content-length", "2")
            conn.endheaders(b"{}")
            response = conn.getresponse()
            answer = response.read().decode()
            conn.close()
    assert response.status == 403 and "is not a model call" in answer
    assert upstream.requests == []  # nothing reached the provider, or anywhere else


def test_relative_paths_are_claudes_from_its_current_directory(tmp_path: Path) -> None:
    decide, _ = judge(tmp_path, "full-auto", fallback="allow")
    git_dir = str(tmp_path / "wt" / ".git")
    (tmp_path / "wt" / ".git").mkdir()

    moved = {**call("Write", file_path="hooks/pre-commit", content="x"), "cwd": git_dir}
    assert decide(moved)[0] == "deny"  # after `cd .git`, a relative write lands in git internals
    assert decide(call("Read", file_path="~/.ssh/id_rsa"))[0] == "deny"
    for pattern in ("src/../../etc/*", "**/.ade/*", "/etc/*"):
        assert decide(call("Glob", pattern=pattern))[0] == "deny", pattern
    assert decide(call("Glob", pattern="src/**/*.py"))[0] == "allow"


def test_once_the_session_is_stopping_every_call_is_refused(tmp_path: Path) -> None:
    decide, asked = judge(tmp_path, "edit", allowed_tools=["write_file"])
    decide.stopping = lambda: "an operator must approve a Bash call"

    verdict, reason = decide(call("Write", file_path="notes.txt", content="x"))

    assert verdict == "deny" and "the session is stopping" in reason
    assert asked == []


def test_the_hook_after_a_call_tells_the_worker_and_prints_nothing(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    socket_path = tmp_path / "d.sock"
    finished = {**call("Bash", command="ls"), "hook_event_name": "PostToolUse"}
    with DecisionServer(socket_path, lambda c: (seen.append(c), ("allow", "recorded"))[1]):
        done = run_hook(socket_path, {**finished, "tool_response": {"stdout": "a.txt"}})
    assert (done.returncode, done.stdout) == (0, "")
    assert seen[0]["tool_response"] == {"stdout": "a.txt"}


def test_a_finished_call_is_journaled_and_its_first_repeat_gets_the_recorded_result(
    tmp_path: Path,
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    first, _ = judge(tmp_path, mode="full-auto", allowed_tools=["bash"])
    first.record = lambda kind, data: events.append((kind, data))
    bash = call("Bash", command="echo once >> counter")
    assert first(bash)[0] == "allow"
    first({**bash, "hook_event_name": "PostToolUse", "tool_response": {"stdout": "counted"}})
    assert [kind for kind, _ in events] == ["agent.tool_decision", "agent.tool_completed"]

    resumed, _ = judge(tmp_path, mode="full-auto", allowed_tools=["bash"])
    resumed.completed = completed_calls(events)
    verdict, reason = resumed(bash)
    assert verdict == "deny" and reason.startswith("not run again") and "counted" in reason
    assert resumed(bash)[0] == "allow"  # a later repeat is the model's own choice: it runs
