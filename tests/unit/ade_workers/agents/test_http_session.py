"""The agent tool loop's tool calls against an in-process scripted provider and the real tools on a
worktree: results, refusals (policy, sandbox, unexposed tools, bad arguments) and capped output.

Every recorded event passes through JSON, as the runner stores it, and a resumed session gets
those events back as its history.
"""

from __future__ import annotations

import json
from pathlib import Path

from ade_tasks.agents.policy import Policy
from ade_workers.agents.providers import ToolCall
from tests.unit.ade_workers.agents.session_support import (
    ALL_TOOLS,
    ScriptedProvider,
    Transcript,
    last_tool_message,
    session,
    turn,
)


def test_tool_call_round_trip_with_real_tools(worktree: Path) -> None:
    # Given a model that writes a file, reads it back, then answers
    provider = ScriptedProvider(
        turn(ToolCall("c1", "write_file", {"path": "notes/a.txt", "content": "one\n"})),
        turn(ToolCall("c2", "read_file", {"path": "notes/a.txt"})),
        turn(text="All done."),
    )
    transcript = Transcript()

    # When the session runs
    outcome = session(provider, worktree, transcript)

    # Then the file was written and the model saw each result after its call
    assert (worktree / "notes" / "a.txt").read_text() == "one\n"
    assert (outcome.status, outcome.summary, outcome.turns) == ("completed", "All done.", 3)
    assert (outcome.input_tokens, outcome.output_tokens, outcome.error) == (30, 15, None)
    assert provider.requests[0] == [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "Do the task."},
    ]
    assert [spec["name"] for spec in provider.tools[0]] == ALL_TOOLS
    assert last_tool_message(provider) == {
        "role": "tool",
        "tool_call_id": "c2",
        "name": "read_file",
        "content": "     1\tone\n",
        "is_error": False,
    }
    # And each model turn was recorded before its tool result, the write marked as started
    assert transcript.kinds() == [
        "agent.model_turn",
        "agent.tool_started",
        "agent.tool_result",
        "agent.model_turn",
        "agent.tool_result",
        "agent.model_turn",
    ]
    assert transcript.of("agent.tool_started") == [{"tool_call_id": "c1", "tool": "write_file"}]
    assert transcript.events[0][1] == {
        "text": "",
        "tool_calls": [
            {
                "id": "c1",
                "name": "write_file",
                "arguments": {"path": "notes/a.txt", "content": "one\n"},
            }
        ],
        "usage": {"input_tokens": 10, "output_tokens": 5},
        "stop_reason": "tool_use",
    }


def test_denied_tool_is_refused_and_the_session_goes_on(worktree: Path) -> None:
    # Given a policy that denies bash, and a model that calls it, then answers
    policy = Policy(denied_tools=("bash",), fallback="allow", mode="full-auto")
    provider = ScriptedProvider(
        turn(ToolCall("c1", "bash", {"command": "touch ran"})), turn(text="Could not run it.")
    )
    transcript = Transcript()

    # When the session runs
    outcome = session(provider, worktree, transcript, policy=policy)

    # Then the command never ran, the refusal was recorded and shown, and the session finished
    assert not (worktree / "ran").exists()
    assert transcript.of("agent.refused") == [
        {"tool_call_id": "c1", "tool": "bash", "reason": "refused: bash is in denied_tools"}
    ]
    assert last_tool_message(provider)["is_error"] is True
    assert "bash is in denied_tools" in last_tool_message(provider)["content"]
    assert (outcome.status, outcome.summary) == ("completed", "Could not run it.")


def test_write_outside_the_sandbox_is_refused(worktree: Path) -> None:
    # Given a sandbox of src/ and a model writing outside it
    policy = Policy(sandbox_root="src", fallback="allow", mode="full-auto")
    provider = ScriptedProvider(
        turn(ToolCall("c1", "write_file", {"path": "docs/x.md", "content": "x"})),
        turn(text="ok"),
    )
    transcript = Transcript()

    # When the session runs
    session(provider, worktree, transcript, policy=policy)

    # Then the write was refused by the policy
    assert not (worktree / "docs").exists()
    (refused,) = transcript.of("agent.refused")
    assert refused["reason"] == "refused: write_file outside sandbox_root src: ../docs/x.md"


def test_tool_not_exposed_is_refused(worktree: Path) -> None:
    # Given a read-only session and a model calling bash anyway
    provider = ScriptedProvider(
        turn(ToolCall("c1", "bash", {"command": "touch ran"})), turn(text="ok")
    )
    transcript = Transcript()

    # When the session runs
    outcome = session(provider, worktree, transcript, tools=["read_file", "report"])

    # Then nothing ran and the model was told the tool is not available
    assert not (worktree / "ran").exists()
    (result,) = transcript.of("agent.tool_result")
    assert result == {
        "tool_call_id": "c1",
        "tool": "bash",
        "ok": False,
        "content": "tool bash is not available in this session",
        "is_error": True,
    }
    assert outcome.status == "completed"


def test_bad_arguments_are_shown_to_the_model(worktree: Path) -> None:
    # Given a call whose arguments could not be parsed
    bad = ToolCall("c1", "read_file", {}, arguments_error="arguments are not valid JSON")
    provider = ScriptedProvider(turn(bad), turn(text="ok"))
    transcript = Transcript()

    # When the session runs
    session(provider, worktree, transcript)

    # Then the model got the parse error as an error result
    message = last_tool_message(provider)
    assert message["is_error"] is True
    assert "not valid JSON" in message["content"]


def test_path_outside_the_worktree_is_refused_by_the_tool(worktree: Path) -> None:
    # Given a file beside the worktree and a model reading it
    (worktree.parent / "secret.txt").write_text("s3cret\n")
    provider = ScriptedProvider(
        turn(ToolCall("c1", "read_file", {"path": "../secret.txt"})), turn(text="ok")
    )
    transcript = Transcript()

    # When the session runs
    session(provider, worktree, transcript)

    # Then the tool refused it and the model never saw the file
    (result,) = transcript.of("agent.tool_result")
    assert result["is_error"] is True
    assert "refused" in result["content"]
    assert "s3cret" not in json.dumps(provider.requests)


def test_long_tool_output_is_capped(worktree: Path) -> None:
    # Given a file far longer than the result cap
    (worktree / "big.txt").write_text(("y" * 99 + "\n") * 500)
    provider = ScriptedProvider(
        turn(ToolCall("c1", "read_file", {"path": "big.txt"})), turn(text="ok")
    )
    transcript = Transcript()

    # When the session runs
    session(provider, worktree, transcript)

    # Then the model and the transcript got the same capped text
    (result,) = transcript.of("agent.tool_result")
    assert len(result["content"]) < 20_100
    assert result["content"].endswith("more characters cut; ask for less]")
    assert last_tool_message(provider)["content"] == result["content"]
