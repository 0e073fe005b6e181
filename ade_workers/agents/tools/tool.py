"""What every agent tool takes and gives back: its arguments, the session's context, its
result, the error it raises, and how it is described to the model."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, Protocol, TypedDict

from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.json_document import JsonObject
from ade_tasks.secrets import Masker
from ade_tasks.settings import GithubSettings
from ade_workers.containment.agent_user import AgentUser
from ade_workers.sandbox.layout import Sandbox


class ToolError(Exception):
    """A tool could not do what was asked; the message is shown to the model."""


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gives back: success, text for the model, structured data for the engine."""

    ok: bool
    content: str
    data: JsonObject = field(default_factory=dict)


class Finding(TypedDict):
    """One finding of a report: how bad, the message, and where (a worktree path, a line)."""

    severity: str
    message: str
    path: NotRequired[str]
    line: NotRequired[int]


class Report(TypedDict):
    """The session's final structured output, as the `report` tool stores it."""

    summary: str
    findings: list[Finding]
    confidence: float | None


class Todo(TypedDict):
    """One item of the agent's todo list."""

    content: str
    status: str


@dataclass(frozen=True)
class RunLink:
    """What the service tools (`github_*`, `notify`) act for: the run, the pull request its
    trigger names (None: it names none), its lane's branch, and where the cluster's GitHub and
    notify webhook are. The token stays here, in the worker; the agent never sees it."""

    run_id: str
    github: GithubSettings
    repo: str | None = None
    number: int | None = None
    lane_branch: str | None = None
    lane_base: str | None = None
    notify_url: str | None = None  # the rule's outputs.notify_url, its secret resolved


@dataclass
class ToolContext:
    """The session state tools act on: the worktree, the allow-listed env, what the engine
    protects, and the agent's notes.

    `protected` defaults to what the worktree alone tells (`ProtectedPaths.for_worktree`); pass
    `ProtectedPaths.from_settings` to protect the configured data dir and database too. Its
    secrets join the masker.
    """

    worktree: Path
    env: Mapping[str, str]
    masker: Masker = field(default_factory=Masker.none)
    kill_grace: float = 3.0
    should_stop: Callable[[], bool] = lambda: False
    #: `should_stop` asking the run's row now (one query; the session asks it once a turn);
    #: None: `should_stop`.
    should_stop_now: Callable[[], bool] | None = None
    time_left: Callable[[], float] = lambda: math.inf
    todos: list[Todo] = field(default_factory=list)
    report: Report | None = None
    protected: ProtectedPaths | None = None
    user: AgentUser | None = None  # who `bash` runs as, when not the worker (ADE_AGENT_USER)
    sandbox: Sandbox | None = None  # where `bash` runs (the worktree writable); None: off
    run: RunLink | None = None  # what the github and notify tools act for; None: no such tools
    call_id: str = ""  # the id of the call being run (`run_tool` sets it): idempotency markers

    def __post_init__(self) -> None:
        if self.protected is None:
            self.protected = ProtectedPaths.for_worktree(self.worktree)
        if self.protected.secrets:
            self.masker = self.masker.with_values(self.protected.secrets)

    @property
    def guard(self) -> ProtectedPaths:
        """What the engine protects in this worktree."""
        assert self.protected is not None  # set in __post_init__
        return self.protected


class Tool(Protocol):
    """An engine tool: checked arguments and the session's context in, a result out; a
    `ToolError` for anything the model can correct."""

    def __call__(self, args: JsonObject, ctx: ToolContext, /) -> ToolResult: ...


class ToolSpec(TypedDict):
    """How a tool is described to the model: what it does and its arguments as JSON schema."""

    description: str
    parameters: JsonObject


STRING: JsonObject = {"type": "string"}


def spec(description: str, required: list[str], **properties: JsonObject) -> ToolSpec:
    """The spec of a tool taking an object with `properties`, `required` of them, no others."""
    return {
        "description": description,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    }
