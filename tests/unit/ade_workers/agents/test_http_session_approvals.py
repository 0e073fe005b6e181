"""The agent tool loop parked on a person: a call the policy asks about and an `ask_user` question,
then the session resumed with the answer.

Every recorded event passes through JSON, as the runner stores it, and a resumed session gets
those events back as its history.
"""

from __future__ import annotations

import time
from pathlib import Path

from ade_tasks.agents.policy import Policy
from ade_workers.agents.http_session import SessionOutcome
from ade_workers.agents.providers import ToolCall
from tests.unit.ade_workers.agents.session_support import (
    ScriptedProvider,
    Transcript,
    last_tool_message,
    session,
    turn,
)

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
    assert last_tool_message(provider)["tool_call_id"] == "c1"
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
    message = last_tool_message(provider)
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
    message = last_tool_message(provider)
    assert message["is_error"] is False
    assert message["content"] == "The operator answered: main, please"


def test_ask_user_declined_tells_the_model_and_goes_on(worktree: Path) -> None:
    transcript = Transcript()
    session(ScriptedProvider(turn(QUESTION)), worktree, transcript, tools=["ask_user"])
    provider = ScriptedProvider(turn(text="Going on."))

    done = session(provider, worktree, transcript, tools=["ask_user"], declined=frozenset({"q1"}))

    assert done.status == "completed"
    assert "declined to answer" in last_tool_message(provider)["content"]


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
    message = last_tool_message(provider)
    assert message["is_error"] is True
    assert "limited to 3 questions per 600 s" in message["content"]
    wait = int(message["content"].split("retry after ")[1].split(" s")[0])
    assert 410 <= wait <= 421  # the oldest of the three, 180 s ago, leaves the window in ~420 s
