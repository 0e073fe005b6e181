"""The agent tool loop keeps the dev stack's secrets out: its data in the worktree is refused and
its token is masked in tool output and in recorded model turns.

Every recorded event passes through JSON, as the runner stores it, and a resumed session gets
those events back as its history.
"""

from __future__ import annotations

import json
from pathlib import Path

from ade_tasks.agents.policy import Policy
from ade_workers.agents.providers import ToolCall
from tests.unit.ade_workers.agents.session_support import (
    ScriptedProvider,
    Transcript,
    session,
    turn,
)

TOKEN = "ade_tok_0123456789abcdef"


def _dev_worktree(worktree: Path) -> None:
    """A worktree that is also the directory `ade-tasks dev` runs in."""
    (worktree / ".ade").mkdir()
    (worktree / ".ade" / "api-token").write_text(TOKEN + "\n")
    (worktree / ".ade" / "ade.db").write_bytes(b"SQLite format 3\x00")


def test_the_engine_data_in_the_worktree_is_refused_even_in_plan_mode(worktree: Path) -> None:
    # Given dev mode's data in the worktree and a plan-mode session allowing reads
    _dev_worktree(worktree)
    policy = Policy(allowed_tools=("read_file", "list_dir", "glob", "grep"), mode="plan")
    provider = ScriptedProvider(
        turn(
            ToolCall("c1", "read_file", {"path": ".ade/api-token"}),
            ToolCall("c2", "grep", {"pattern": "ade_tok"}),
            ToolCall("c3", "list_dir", {}),
        ),
        turn(text="ok"),
    )
    transcript = Transcript()

    # When the model reads the token, searches for it and lists the worktree
    session(provider, worktree, transcript, policy=policy, tools=["read_file", "grep", "list_dir"])

    # Then the read is refused by the engine, and neither search nor listing reveals it
    read, search, listing = transcript.of("agent.tool_result")
    assert read["is_error"] and "engine's own data" in read["content"]
    assert search["content"] == "[no matches]"
    assert ".ade" not in listing["content"]
    assert TOKEN not in json.dumps(transcript.events) + json.dumps(provider.requests)


def test_the_dev_token_is_masked_in_what_a_command_prints(worktree: Path) -> None:
    # Given a full-auto session in dev mode's directory, its bash printing the token
    _dev_worktree(worktree)
    provider = ScriptedProvider(
        turn(ToolCall("c1", "bash", {"command": "cat .ade/api-token"})),
        turn(text="ok"),
    )
    transcript = Transcript()

    # When the session runs
    session(provider, worktree, transcript)

    # Then the model and the transcript only see the mask
    (result,) = transcript.of("agent.tool_result")
    assert "***" in result["content"]
    assert TOKEN not in json.dumps(transcript.events) + json.dumps(provider.requests)


def test_a_model_turn_echoing_a_secret_is_recorded_masked(worktree: Path) -> None:
    # Given a session whose masker knows a secret, and a model that echoes it
    _dev_worktree(worktree)
    transcript = Transcript()

    # When the session runs
    session(ScriptedProvider(turn(text=f"the token is {TOKEN}")), worktree, transcript)

    # Then the transcript keeps only the mask
    (recorded,) = transcript.of("agent.model_turn")
    assert recorded["text"] == "the token is ***"
