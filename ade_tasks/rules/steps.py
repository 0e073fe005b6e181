"""What runs: the built-in step types of a chain, the registry of their models, and the two
executions (a chain of steps, or one agent session).

A step model declares its action type: the `type` literal names it and the class variable
`templated` lists the fields that may hold templates. `ACTION_TYPES` lists the built-in models
(one line each), for rules validated without the workers; `ACTION_MODELS` and the `Action` union
are derived from it. An action type is declared whole (model and executor) and registered in
`ade_workers.actions.registry`, which adds the model of a type from outside this package here
(`ade_tasks.rules.extensions`).
"""

from __future__ import annotations

import re
from functools import reduce
from operator import or_
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, TypeAlias, get_args

from pydantic import (
    BeforeValidator,
    Field,
    field_validator,
    model_validator,
)

from ade_tasks.durations import parse_duration
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.agent import AgentSession
from ade_tasks.rules.document import (
    ADE_ACTION_NAME,
    BRANCH_PREFIX,
    DEFAULT_STEP_TIMEOUT_SEC,
    MAX_STEP_TIMEOUT_SEC,
    MIN_STEP_TIMEOUT_SEC,
    STEP_ID,
    Document,
)


def _clamp_timeout(value: object) -> float:
    seconds = parse_duration(value).total_seconds()
    return min(max(seconds, MIN_STEP_TIMEOUT_SEC), MAX_STEP_TIMEOUT_SEC)


StepTimeout = Annotated[float, BeforeValidator(_clamp_timeout)]
EnvName = r"[A-Za-z_][A-Za-z0-9_]*"


class Step(Document):
    """What every step of a built-in chain has, whatever its action.

    `condition` is a small safe expression (see `ade_tasks.rules.conditions`); a false condition
    records the step as skipped. `retry` re-runs a failed step up to 5 times with exponential
    backoff from 400 ms. `always_run` steps run even after an earlier failure, like `finally`,
    and the original failure stays the run's outcome; a step whose condition asks about a
    failure (`failure()`, `failed('tests')`) is `always_run`, so it is evaluated when it can
    be true. `lane` runs the step in a named lane, in
    the lane created earlier in this run (`created`), or in the project root (`project`); by
    default a step runs in the run's lane when it has one, else in the project root.
    """

    id: str = Field(default="", pattern=STEP_ID)
    condition: str | None = None
    retry: int = Field(default=0, ge=0, le=5)
    continue_on_failure: bool = False
    always_run: bool = False
    timeout_sec: StepTimeout = DEFAULT_STEP_TIMEOUT_SEC
    lane: str | None = None

    #: The fields of this step type that may hold `{{...}}` templates and `${env:NAME}` secret
    #: references, in the order they are rendered.
    templated: ClassVar[tuple[str, ...]] = ()
    #: Does a step of this type change nothing outside the run, so it may run before a
    #: `require_human` gate? (`ade-action` and `agent-session` steps decide per step.)
    side_effect_free: ClassVar[bool] = False
    if TYPE_CHECKING:
        type: str  # each step type narrows it to its own literal

    @model_validator(mode="after")
    def _failure_steps_always_run(self) -> Step:
        from ade_tasks.rules.conditions import asks_about_failure  # it imports templating only

        # "Only if an earlier step failed" must not need a second flag to ever be true.
        if self.condition and not self.always_run and asks_about_failure(self.condition):
            object.__setattr__(self, "always_run", True)
        return self


class CommandStep(Step):
    """A command in the project or lane, in the engine's sandbox (`ade_workers.sandbox`).

    `network`: `host` reaches what the worker reaches; `none` only the sandbox's own loopback.
    Unset, it is `host`, except after an agent-session step of the same rule, whose code the
    command may run: then `none` (and the git directories are read-only whatever it says).
    """

    command: str | list[str]
    cwd: str = "."
    env: dict[str, str] = Field(default_factory=dict)
    network: Literal["host", "none"] | None = None

    @field_validator("command")
    @classmethod
    def _non_empty(cls, value: str | list[str]) -> str | list[str]:
        if not value or (isinstance(value, str) and not value.strip()):
            raise ValueError("command must not be empty")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.fullmatch(EnvName, name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return value


class RunCommandAction(CommandStep):
    """Run a command in the project: a string runs through `/bin/sh -c`, a list runs as argv."""

    type: Literal["run-command"]
    templated = ("command", "cwd", "env")


class RunTestsAction(CommandStep):
    """Run the project's tests; JUnit XML the command writes becomes the step's result.

    The command finds a report path in `$ADE_JUNIT_XML` (e.g. `pytest --junitxml=$ADE_JUNIT_XML`);
    `junit` names further report files (globs relative to the step's directory).
    """

    type: Literal["run-tests"]
    junit: list[str] = Field(default_factory=list)
    templated = ("command", "cwd", "env", "junit")


class CreateLaneAction(Step):
    """Create a lane: a git worktree on a new branch from `base`, used by the later steps."""

    type: Literal["create-lane"]
    name: str = "{{rule.id}} {{date}}"
    base: str = "HEAD"
    branch_prefix: str = Field(default="ade/", pattern=BRANCH_PREFIX)
    templated = ("name", "base")


class DeleteLaneAction(Step):
    """Delete a lane: the named one, else the one created in this run, else the trigger's."""

    type: Literal["delete-lane"]
    target: str | None = None
    after_minutes: float = Field(default=0, ge=0, le=60 * 24 * 30)
    force: bool = False
    #: The remote whose copy of the branch is deleted too (naming one implies
    #: `delete_remote_branch: true`); `origin` when only `delete_remote_branch` is set.
    delete_remote: str | None = None
    #: false keeps the lane's local branch (only the worktree goes).
    delete_branch: bool = True
    delete_remote_branch: bool | None = None
    templated = ("target",)

    @model_validator(mode="after")
    def _remote_consistent(self) -> DeleteLaneAction:
        if self.delete_remote_branch is False and self.delete_remote:
            raise ValueError(
                f"delete_remote names the remote {self.delete_remote!r} but "
                "delete_remote_branch is false; drop delete_remote to keep the remote branch, "
                "or delete_remote_branch to delete it"
            )
        return self

    @property
    def remote(self) -> str | None:
        """The remote to delete the branch on, or None to leave remotes alone."""
        if self.delete_remote_branch or self.delete_remote:
            return self.delete_remote or "origin"
        return None


class PredictConflictsAction(Step):
    """List the files that would conflict when the lane's branch merges into its base."""

    type: Literal["predict-conflicts"]
    target: str | None = None
    base: str | None = None
    templated = ("base", "target")
    side_effect_free = True


class AdeActionStep(Step):
    """Call one allow-listed internal action (`domain.action`) with typed arguments."""

    type: Literal["ade-action"]
    action: str = Field(pattern=ADE_ACTION_NAME)
    args: JsonObject = Field(default_factory=dict)
    templated = ("args",)


class AgentSessionStep(Step, AgentSession):
    """An agent session as one step of a chain: its prompt sees the earlier steps' outputs,
    and it works in the step's lane like any other step."""

    type: Literal["agent-session"]
    timeout_sec: StepTimeout = MAX_STEP_TIMEOUT_SEC


#: The action types rules may name, in the order they are listed: one line per type.
ACTION_TYPES: tuple[type[Step], ...] = (
    RunCommandAction,
    RunTestsAction,
    CreateLaneAction,
    DeleteLaneAction,
    PredictConflictsAction,
    AdeActionStep,
    AgentSessionStep,
)


def action_name(model: type[Step]) -> str:
    """The `type` a step model answers to (its `type` literal)."""
    (name,) = get_args(model.model_fields["type"].annotation)
    return str(name)


ACTION_MODELS: dict[str, type[Step]] = {action_name(model): model for model in ACTION_TYPES}
LANE_STEPS = ("create-lane", "delete-lane", "predict-conflicts")


def known_action_types() -> tuple[str, ...]:
    """The action types rules may name, as registered now."""
    return tuple(ACTION_MODELS)


def templated_fields() -> tuple[str, ...]:
    """Every field some step type templates, once each, in the order they are rendered."""
    return tuple(
        dict.fromkeys(name for model in ACTION_MODELS.values() for name in model.templated)
    )


def _known_action(value: object) -> object:
    known = known_action_types()
    if isinstance(value, dict) and value.get("type") not in known:
        available = ", ".join(known)
        if "type" not in value:
            raise ValueError(f"the step has no type; add `type:` with one of: {available}")
        raise ValueError(f"unknown action type {value['type']!r} (available: {available})")
    return value


def action_union() -> object:
    """The pydantic type of one step: the registered step models, told apart by `type`."""
    members = reduce(or_, ACTION_MODELS.values())
    return Annotated[
        Annotated[members, Field(discriminator="type")], BeforeValidator(_known_action)
    ]


if TYPE_CHECKING:
    Action: TypeAlias = Step
else:
    Action = action_union()


class BuiltinExecution(Document):
    """An ordered chain of deterministic built-in actions."""

    kind: Literal["built-in"]
    queue: str | None = None
    actions: list[Action] = Field(min_length=1)

    @model_validator(mode="after")
    def _step_ids(self) -> BuiltinExecution:
        for index, action in enumerate(self.actions):
            object.__setattr__(action, "id", action.id or default_step_id(action.type, index))
        return self


def default_step_id(action_type: str, index: int) -> str:
    """The id of a step that names none: its type and its position, e.g. `run-command-2`."""
    return f"{action_type}-{index + 1}"


class AgentExecution(AgentSession):
    """A rule whose whole work is one AI coding-agent session under a permission policy.

    It runs as a chain of one `agent-session` step named `session`; `lane` works as a step's
    `lane` does (by default the trigger's lane, e.g. of a `lane.created` event).
    """

    kind: Literal["agent-session"]
    queue: str | None = None
    lane: str | None = None

    @property
    def actions(self) -> list[AgentSessionStep]:
        """The chain this execution runs: its one step, `session`."""
        fields = self.model_dump(exclude={"kind", "queue"}, exclude_none=True)
        return [
            AgentSessionStep.model_validate({**fields, "id": "session", "type": "agent-session"})
        ]


Execution = Annotated[BuiltinExecution | AgentExecution, Field(discriminator="kind")]
