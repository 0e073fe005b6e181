"""How the agent tool loop ends: turn, token and time limits, a provider that gives up, and the
report tool's findings.

Every recorded event passes through JSON, as the runner stores it, and a resumed session gets
those events back as its history.
"""

from __future__ import annotations

import time
from pathlib import Path

from ade_workers.agents.http_session import SessionLimits
from ade_workers.agents.providers import ModelTurn, ToolCall
from ade_workers.integrations.http import IntegrationUnavailableError
from tests.unit.ade_workers.agents.session_support import (
    ScriptedProvider,
    Transcript,
    in_seconds,
    session,
    turn,
)

LOOP = ToolCall("c", "list_dir", {})


def test_max_turns_stops_with_the_partial_transcript(worktree: Path) -> None:
    # Given a model that never stops calling tools, and two turns allowed
    provider = ScriptedProvider(turn(LOOP), turn(LOOP), turn(LOOP))
    transcript = Transcript()
    limits = SessionLimits(max_turns=2, max_tokens=None, deadline=in_seconds(60))

    # When the session runs
    outcome = session(provider, worktree, transcript, limits=limits)

    # Then it stopped after two turns, both recorded with their results
    assert (outcome.status, outcome.turns) == ("max_turns", 2)
    assert outcome.error == "stopped after 2 model turns (max_turns 2)"
    assert transcript.kinds() == ["agent.model_turn", "agent.tool_result"] * 2


def test_token_budget_stops_the_session(worktree: Path) -> None:
    # Given 70 tokens a turn and a budget of 100
    provider = ScriptedProvider(turn(LOOP, tokens=(60, 10)), turn(LOOP, tokens=(60, 10)))
    transcript = Transcript()
    limits = SessionLimits(max_turns=10, max_tokens=100, deadline=in_seconds(60))

    # When the session runs
    outcome = session(provider, worktree, transcript, limits=limits)

    # Then it stopped once over budget, after the second turn's tools
    assert (outcome.status, outcome.turns) == ("token_budget", 2)
    assert (outcome.input_tokens, outcome.output_tokens) == (120, 20)
    assert transcript.kinds() == ["agent.model_turn", "agent.tool_result"] * 2


def test_deadline_stops_the_session(worktree: Path) -> None:
    # Given a deadline that passes while the model answers its first turn
    deadline = in_seconds(0.2)

    def slow() -> ModelTurn:
        time.sleep(max(0.0, deadline - time.monotonic()) + 0.01)
        return turn(LOOP)

    provider = ScriptedProvider(slow, turn(LOOP))
    transcript = Transcript()
    limits = SessionLimits(max_turns=10, max_tokens=None, deadline=deadline)

    # When the session runs
    outcome = session(provider, worktree, transcript, limits=limits)

    # Then it timed out after that turn, its tool result recorded
    assert (outcome.status, outcome.turns) == ("timed_out", 1)
    assert transcript.kinds() == ["agent.model_turn", "agent.tool_result"]


def test_provider_failure_fails_the_session(worktree: Path) -> None:
    # Given a provider that gives up after its own retries on the second turn
    provider = ScriptedProvider(turn(LOOP), IntegrationUnavailableError("gave up after 3 attempts"))
    transcript = Transcript()

    # When the session runs
    outcome = session(provider, worktree, transcript)

    # Then it failed with the provider's message, the first turn kept
    assert (outcome.status, outcome.error, outcome.turns) == (
        "failed",
        "gave up after 3 attempts",
        1,
    )
    assert transcript.kinds() == ["agent.model_turn", "agent.tool_result"]


def test_report_ends_the_session_with_findings(worktree: Path) -> None:
    # Given a model that reports a finding alongside a todo update
    report = ToolCall(
        "c1",
        "report",
        {
            "summary": "One problem.",
            "findings": [
                {"severity": "warning", "path": "README.md", "line": 1, "message": "Too short"}
            ],
            "confidence": 0.8,
        },
    )
    notes = ToolCall("c2", "todo", {"items": [{"content": "review", "status": "done"}]})
    provider = ScriptedProvider(turn(report, notes, text="Reporting."))
    transcript = Transcript()

    # When the session runs
    outcome = session(provider, worktree, transcript)

    # Then it completed with the report, after the turn's other call, with no further model call
    assert outcome.status == "completed"
    assert (outcome.summary, outcome.confidence) == ("One problem.", 0.8)
    assert outcome.findings == [
        {"severity": "warning", "path": "README.md", "line": 1, "message": "Too short"}
    ]
    assert [r["tool"] for r in transcript.of("agent.tool_result")] == ["report", "todo"]
