"""The agent tool loop under test: a scripted in-process provider, a JSON-faithful recorder and
`session(...)`, which runs `run_session` on a worktree with the real tools."""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ade_tasks.agents.policy import Policy
from ade_tasks.db.approvals import ToolDecisions
from ade_workers.agents.http_session import SessionLimits, SessionOutcome, run_session
from ade_workers.agents.providers import Message, ModelTurn, ToolCall, ToolSpec, Usage
from ade_workers.agents.tools.tool import ToolContext

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
    """A model turn making `calls` (none: the final answer)."""
    return ModelTurn(
        text=text,
        tool_calls=list(calls),
        usage=Usage(*tokens),
        stop_reason="tool_use" if calls else "end_turn",
    )


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
    """Run the tool loop on `worktree`, resuming from what `transcript` recorded so far."""
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
        limits=limits or SessionLimits(max_turns=10, max_tokens=None, deadline=in_seconds(60)),
        history=history,
        record=transcript,
        decisions=ToolDecisions(approved, declined, tools_for_session, answers or {}),
    )


def in_seconds(seconds: float) -> float:
    """A `time.monotonic()` deadline `seconds` from now."""
    return time.monotonic() + seconds


def last_tool_message(provider: ScriptedProvider) -> Message:
    """The last message of the provider's last request: the newest tool result it saw."""
    return provider.requests[-1][-1]
