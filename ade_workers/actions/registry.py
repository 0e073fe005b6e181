"""The action types, each declared once: its step model and its executor, registered in one line.

Adding an action type: one module holding its step model (a `Step` whose `type` literal names it
and whose `templated` lists the fields that may hold templates) and its executor
(`(action, StepContext) -> StepOutcome`), declared as `ActionType(Model, executor)`, and one line,
`register(MY_ACTION)`, which also lets rules name it (the model joins
`ade_tasks.rules.steps.ACTION_MODELS`, from which the step union is derived).

The built-in types register the same way, below. Their models stay in the domain
(`ade_tasks/rules/steps.py`, listed in `ACTION_TYPES`) and their executors here, in
`ade_workers/actions/`, because rules are validated where the workers are not loaded (the API,
the CLI, the beat); the declaration holds the two once, and registering a built-in's model again
changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ade_tasks.errors import not_registered
from ade_tasks.rules.extensions import register_action_model, unregister_action_model
from ade_tasks.rules.steps import (
    AdeActionStep,
    AgentSessionStep,
    CreateLaneAction,
    DeleteLaneAction,
    PredictConflictsAction,
    RunCommandAction,
    RunTestsAction,
    Step,
    action_name,
)
from ade_workers.actions.ade_action import ade_action
from ade_workers.actions.agent_session import agent_session
from ade_workers.actions.executor import ActionExecutor
from ade_workers.actions.lane_actions import create_lane, delete_lane, predict_conflicts
from ade_workers.actions.run_command import run_command
from ade_workers.actions.run_tests import run_tests

S = TypeVar("S", bound=Step)


@dataclass(frozen=True)
class ActionType(Generic[S]):
    """Everything about one action type: the step model rules write and the executor that runs
    it (the type system sees that they belong together here, and nowhere after)."""

    model: type[S]
    executor: ActionExecutor[S]

    @property
    def name(self) -> str:
        """The `type` its steps name (the model's `type` literal)."""
        return action_name(self.model)


#: Each executor takes its own step model; the `type` key is what pairs a step with it, a
#: pairing the type system cannot see, so the registry holds executors of any step model.
EXECUTORS: dict[str, ActionExecutor[Any]] = {}


def register(action: ActionType[Any]) -> None:
    """Let rules name the action type and workers run it; ValueError if another model or
    executor has its name."""
    known = EXECUTORS.get(action.name)
    if known is not None and known is not action.executor:
        raise ValueError(f"action type {action.name!r} has an executor already")
    register_action_model(action.model)
    EXECUTORS[action.name] = action.executor


def unregister(action: ActionType[Any]) -> None:
    """Rules may no longer name the action type, nor workers run it."""
    if EXECUTORS.get(action.name) is action.executor:
        del EXECUTORS[action.name]
    unregister_action_model(action.model)


register(ActionType(RunCommandAction, run_command))
register(ActionType(RunTestsAction, run_tests))
register(ActionType(CreateLaneAction, create_lane))
register(ActionType(DeleteLaneAction, delete_lane))
register(ActionType(PredictConflictsAction, predict_conflicts))
register(ActionType(AdeActionStep, ade_action))
register(ActionType(AgentSessionStep, agent_session))


def registry() -> dict[str, ActionExecutor[Any]]:
    """Action type -> executor: a copy a runner may extend (tests add their own)."""
    return dict(EXECUTORS)


def unknown_action(action_type: str, known_types: Iterable[str]) -> str:
    """The error of a step whose action type this worker has no executor for."""
    return not_registered(
        "an action type", action_type, known_types, "update the workers to the rule's version"
    ).message
