"""The agent tool loop against an in-process scripted provider and the real tools on a worktree.

Every recorded event passes through JSON, as the runner stores it, and a resumed session gets
those events back as its history.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ade_tasks.agents.policy import Policy
from ade_tasks.db.approvals import ToolDecisions
from ade_workers.agents.http_session import SessionLimits, SessionOutcome, run_session
from ade_workers.agents.providers import (
    Message,
    ModelTurn,
    ToolCall,
    ToolSpec,
    Usage,
)
from ade_workers.agents.tools.tool import ToolContext
from ade_workers.integrations.http import IntegrationUnavailableError

Step = ModelTurn | Exception | Callable[[], ModelTurn]
ALLOW = Policy(fallback="allow", mode="full-auto")
ALL_TOOLS = ["read_file", "list_dir", "write_file", "bash", "todo", "report"]


class ScriptedProvider:
    """A `ModelProvider` answering each call with the next scripted turn, keeping what it got."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[list[Message]] = []
        self.tools: list[list[ToolSpec]] = []

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        model: str,
        max_tokens: int,
        deadline: float | None,
    ) -> ModelTurn:
        self.requests.append(copy.deepcopy(messages))
        self.tools.append(tools)
        assert self.steps, "the session made a model call nobody scripted"
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step() if callable(step) else step


class Transcript:
    """The recorder: events as the runner would store them (JSON round trip)."""

    def __init__(self, events: list[tuple[str, dict[str, Any]]] | None = None) -> None:
        self.events = list(events or [])

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, json.loads(json.dumps(data))))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [data for k, data in self.events if k == kind]


def turn(*calls: ToolCall, text: str = "", tokens: tuple[int, int] = (10, 5)) -> ModelTurn:
    return ModelTurn(
        text=text,
        tool_calls=list(calls),
        usage=Usage(*tokens),
        stop_reason="tool_use" if calls else "end_turn",
    )


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "worktree"
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    return root


def session(
    provider: ScriptedProvider,
    worktree: Path,
    transcript: Transcript,
    *,
    policy: Policy = ALLOW,
    tools: list[str] | None = None,
    limits: SessionLimits | None = None,
    approved: frozenset[str] = frozenset(),
    declined: frozenset[str] = frozenset(),
    tools_for_session: frozenset[str] = frozenset(),
    answers: dict[str, str] | None = None,
) -> SessionOutcome:
    history = list(transcript.events)
    return run_session(
        provider,
        model="m",
        max_tokens_per_turn=512,
        system="You are careful.",
        prompt="Do the task.",
        tools=ALL_TOOLS if tools is None else tools,
        policy=policy,
        tool_ctx=ToolContext(worktree=worktree, env={"PATH": os.environ["PATH"]}),
        limits=limits or SessionLimits(max_turns=10, max_tokens=None, deadline=_in(60)),
        history=history,
        record=transcript,
        decisions=ToolDecisions(approved, declined, tools_for_session, answers or {}),
    )


def _in(seconds: float) -> float:
    return time.monotonic() + seconds


def _last_tool_message(provider: ScriptedProvider) -> Message:
    return provider.requests[-1][-1]


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
    assert _last_tool_message(provider) == {
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
    assert _last_tool_message(provider)["is_error"] is True
    assert "bash is in denied_tools" in _last_tool_message(provider)["content"]
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
    message = _last_tool_message(provider)
    assert message["is_error"] is True
    assert "not valid JSON" in message["content"]


ASK = Policy(allowed_tools=("read_file",), fallback="ask", mode="full-auto")
APPEND = ToolCall("c1", "bash", {"command": "echo ran >> log.txt"})


def _waiting(worktree: Path) -> tuple[SessionOutcome, Transcript]:
    transcript = Transcript()
    outcome = session(ScriptedProvider(turn(APPEND)), worktree, transcript, policy=ASK)
    return outcome, transcript


def test_ask_parks_the_session_waiting_with_the_pending_call(worktree: Path) -> None:
    # When a model calls a tool the policy asks about
    outcome, transcript = _waiting(worktree)

    # Then the session waits for an operator, nothing ran, and the request was recorded
    pending = {
        "tool_call_id": "c1",
        "tool": "bash",
        "arguments": {"command": "echo ran >> log.txt"},
        "reason": "no rule allows bash; the policy's fallback is ask",
    }
    assert (outcome.status, outcome.pending, outcome.turns) == ("waiting", pending, 1)
    assert not (worktree / "log.txt").exists()
    assert transcript.kinds() == ["agent.model_turn", "agent.approval_request"]
    assert transcript.of("agent.approval_request") == [pending]


def test_resume_approved_runs_the_call_once_and_completes(worktree: Path) -> None:
    # Given a session waiting on approval of c1
    _, transcript = _waiting(worktree)
    provider = ScriptedProvider(turn(text="Appended."))

    # When it resumes with c1 approved
    outcome = session(provider, worktree, transcript, policy=ASK, approved=frozenset({"c1"}))

    # Then the command ran once, the first model call was not repeated, and the session ended
    assert (worktree / "log.txt").read_text() == "ran\n"
    assert len(provider.requests) == 1
    assert _last_tool_message(provider)["tool_call_id"] == "c1"
    assert (outcome.status, outcome.summary, outcome.turns) == ("completed", "Appended.", 2)
    assert (outcome.input_tokens, outcome.output_tokens) == (20, 10)
    assert len(transcript.of("agent.tool_result")) == 1


def test_resume_declined_tells_the_model(worktree: Path) -> None:
    # Given a session waiting on approval of c1
    _, transcript = _waiting(worktree)
    provider = ScriptedProvider(turn(text="Understood."))

    # When it resumes with c1 declined
    outcome = session(provider, worktree, transcript, policy=ASK, declined=frozenset({"c1"}))

    # Then the command never ran and the model got the refusal
    assert not (worktree / "log.txt").exists()
    message = _last_tool_message(provider)
    assert message["is_error"] is True
    assert "declined by an operator" in message["content"]
    assert outcome.status == "completed"


def test_resume_without_an_answer_waits_again_without_a_second_request(worktree: Path) -> None:
    # Given a session waiting on approval of c1
    _, transcript = _waiting(worktree)

    # When it resumes with no answer yet
    outcome = session(ScriptedProvider(), worktree, transcript, policy=ASK)

    # Then it is still waiting, with one approval request on record
    assert outcome.status == "waiting"
    assert len(transcript.of("agent.approval_request")) == 1


LOOP = ToolCall("c", "list_dir", {})


def test_max_turns_stops_with_the_partial_transcript(worktree: Path) -> None:
    # Given a model that never stops calling tools, and two turns allowed
    provider = ScriptedProvider(turn(LOOP), turn(LOOP), turn(LOOP))
    transcript = Transcript()
    limits = SessionLimits(max_turns=2, max_tokens=None, deadline=_in(60))

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
    limits = SessionLimits(max_turns=10, max_tokens=100, deadline=_in(60))

    # When the session runs
    outcome = session(provider, worktree, transcript, limits=limits)

    # Then it stopped once over budget, after the second turn's tools
    assert (outcome.status, outcome.turns) == ("token_budget", 2)
    assert (outcome.input_tokens, outcome.output_tokens) == (120, 20)
    assert transcript.kinds() == ["agent.model_turn", "agent.tool_result"] * 2


def test_deadline_stops_the_session(worktree: Path) -> None:
    # Given a deadline that passes while the model answers its first turn
    deadline = _in(0.2)

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
    assert _last_tool_message(provider)["content"] == result["content"]


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
    assert _last_tool_message(provider)["content"] == result["content"]
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


# --- ask_user ---------------------------------------------------------------------------------

QUESTION = ToolCall("q1", "ask_user", {"question": "Which branch should I fix?"})


def test_ask_user_parks_the_run_as_a_question_and_the_answer_reaches_the_model(
    worktree: Path,
) -> None:
    # Given a session whose model asks the operator a question
    transcript = Transcript()
    asked = session(ScriptedProvider(turn(QUESTION)), worktree, transcript, tools=["ask_user"])

    # Then it waits on a pending input of kind question
    assert asked.status == "waiting"
    assert asked.pending is not None
    assert (asked.pending["kind"], asked.pending["tool"]) == ("question", "ask_user")
    assert asked.pending["arguments"] == {"question": "Which branch should I fix?"}

    # When the operator's text answer arrives, the model gets it as the call's result
    provider = ScriptedProvider(turn(text="Fixing main."))
    done = session(
        provider, worktree, transcript, tools=["ask_user"], approved=frozenset({"q1"}),
        answers={"q1": "main, please"},
    )  # fmt: skip
    assert done.status == "completed"
    message = _last_tool_message(provider)
    assert message["is_error"] is False
    assert message["content"] == "The operator answered: main, please"


def test_ask_user_declined_tells_the_model_and_goes_on(worktree: Path) -> None:
    transcript = Transcript()
    session(ScriptedProvider(turn(QUESTION)), worktree, transcript, tools=["ask_user"])
    provider = ScriptedProvider(turn(text="Going on."))

    done = session(provider, worktree, transcript, tools=["ask_user"], declined=frozenset({"q1"}))

    assert done.status == "completed"
    assert "declined to answer" in _last_tool_message(provider)["content"]


def test_ask_user_is_rate_limited_with_a_sliding_window(worktree: Path) -> None:
    # Given a session that already asked three questions in the last ten minutes
    now = time.time()
    transcript = Transcript(
        [("agent.approval_request", {"tool_call_id": f"old{i}", "kind": "question",
                                     "asked_at": now - 60 * (3 - i)}) for i in range(3)]
    )  # fmt: skip
    provider = ScriptedProvider(turn(QUESTION), turn(text="I will decide myself."))

    # When it asks a fourth
    outcome = session(provider, worktree, transcript, tools=["ask_user"])

    # Then it is told when it may ask again, and the run does not park
    assert outcome.status == "completed"
    message = _last_tool_message(provider)
    assert message["is_error"] is True
    assert "limited to 3 questions per 600 s" in message["content"]
    wait = int(message["content"].split("retry after ")[1].split(" s")[0])
    assert 410 <= wait <= 421  # the oldest of the three, 180 s ago, leaves the window in ~420 s
