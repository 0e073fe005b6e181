"""The agent tool loop resumed after its worker died: an unfinished call runs once, a call in flight
is reported interrupted, a finished report needs no model call.

Every recorded event passes through JSON, as the runner stores it, and a resumed session gets
those events back as its history.
"""

from __future__ import annotations

from pathlib import Path

from ade_workers.agents.providers import ToolCall
from tests.unit.ade_workers.agents.session_support import (
    ScriptedProvider,
    Transcript,
    last_tool_message,
    session,
    turn,
)


def test_resume_after_a_crash_runs_only_the_unfinished_call(worktree: Path) -> None:
    # Given a recorded turn with two calls, only the first with a recorded result
    first = {"tool_call_id": "a", "tool": "bash", "ok": True, "content": "", "is_error": False}
    calls = [
        {"id": "a", "name": "bash", "arguments": {"command": "echo a >> log.txt"}},
        {"id": "b", "name": "bash", "arguments": {"command": "echo b >> log.txt"}},
    ]
    transcript = Transcript(
        [
            (
                "agent.model_turn",
                {
                    "text": "Two commands.",
                    "tool_calls": calls,
                    "usage": {"input_tokens": 50, "output_tokens": 7},
                    "stop_reason": "tool_use",
                },
            ),
            ("agent.tool_result", first),
        ]
    )
    provider = ScriptedProvider(turn(text="Both done."))

    # When the session resumes
    outcome = session(provider, worktree, transcript)

    # Then only b ran, the recorded turn was not asked again, and its cost still counts
    assert (worktree / "log.txt").read_text() == "b\n"
    assert len(provider.requests) == 1
    assert [m.get("tool_call_id") for m in provider.requests[0][3:]] == ["a", "b"]
    assert provider.requests[0][2]["tool_calls"] == calls
    assert (outcome.status, outcome.turns, outcome.input_tokens) == ("completed", 2, 60)


def test_resume_after_the_report_completes_without_a_model_call(worktree: Path) -> None:
    # Given a session that crashed after storing its report
    report = ToolCall("c1", "report", {"summary": "Fine."})
    transcript = Transcript()
    session(ScriptedProvider(turn(report)), worktree, transcript)
    del transcript.events[2:]

    # When it resumes
    outcome = session(ScriptedProvider(), worktree, transcript)

    # Then it completes from the recorded report
    assert (outcome.status, outcome.summary) == ("completed", "Fine.")


def _crashed_mid_call(command: str) -> Transcript:
    """A transcript whose worker died while call `b` (started, no result) was running."""
    calls = [{"id": "b", "name": "bash", "arguments": {"command": command}}]
    turn_data = {
        "text": "Running it.",
        "tool_calls": calls,
        "usage": {"input_tokens": 50, "output_tokens": 7},
        "stop_reason": "tool_use",
    }
    return Transcript(
        [
            ("agent.model_turn", turn_data),
            ("agent.tool_started", {"tool_call_id": "b", "tool": "bash"}),
        ]
    )


def test_a_call_in_flight_when_its_worker_died_is_reported_interrupted_not_run_again(
    worktree: Path,
) -> None:
    # Given a session whose bash call had started when its worker died
    transcript = _crashed_mid_call("echo b >> log.txt")
    provider = ScriptedProvider(turn(text="I will check log.txt first."))

    # When the session resumes
    outcome = session(provider, worktree, transcript)

    # Then the command did not run again; the model got an error result saying so
    assert not (worktree / "log.txt").exists()
    (result,) = transcript.of("agent.tool_result")
    assert result["tool_call_id"] == "b"
    assert (result["ok"], result["is_error"], result["interrupted"]) == (False, True, True)
    assert result["content"].startswith(
        "bash was interrupted when its worker stopped: it started, but its outcome is unknown"
    )
    assert last_tool_message(provider)["content"] == result["content"]
    assert (outcome.status, outcome.turns) == ("completed", 2)
    assert transcript.kinds().count("agent.tool_started") == 1


def test_a_call_that_never_started_runs_on_resume_and_reads_run_again(worktree: Path) -> None:
    # Given a turn of a read and a write whose worker died before either was recorded as done
    calls = [
        {"id": "r", "name": "read_file", "arguments": {"path": "README.md"}},
        {"id": "w", "name": "write_file", "arguments": {"path": "a.txt", "content": "a"}},
    ]
    transcript = Transcript(
        [("agent.model_turn", {"text": "", "tool_calls": calls, "usage": {}, "stop_reason": ""})]
    )

    # When the session resumes
    session(ScriptedProvider(turn(text="ok")), worktree, transcript)

    # Then both ran, and only the write was marked as started (a read can simply run again)
    assert (worktree / "a.txt").read_text() == "a"
    assert [r["ok"] for r in transcript.of("agent.tool_result")] == [True, True]
    assert transcript.of("agent.tool_started") == [{"tool_call_id": "w", "tool": "write_file"}]
