"""The action executors by action type: one module per type, and this one line per type.

Adding an action type: its step model declares it in the domain (`ade_tasks.rules.steps`: its
`type` literal, its templated fields, one line in `ACTION_TYPES`, from which the step union is
derived); its executor module here in `ade_workers/actions/` runs it, registered against that
model in `EXECUTORS`. A test holds the two registries to the same action types.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ade_tasks.errors import not_registered
from ade_tasks.rules.steps import (
    AdeActionStep,
    AgentSessionStep,
    CreateLaneAction,
    DeleteLaneAction,
    PredictConflictsAction,
    RunCommandAction,
    RunTestsAction,
    action_name,
)
from ade_workers.actions.ade_action import ade_action
from ade_workers.actions.agent_session import agent_session
from ade_workers.actions.executor import ActionExecutor
from ade_workers.actions.lane_actions import create_lane, delete_lane, predict_conflicts
from ade_workers.actions.run_command import run_command
from ade_workers.actions.run_tests import run_tests

#: Each executor takes its own step model; the `type` key is what pairs a step with it, a
#: pairing the type system cannot see, so the registry holds executors of any step model.
EXECUTORS: dict[str, ActionExecutor[Any]] = {
    action_name(RunCommandAction): run_command,
    action_name(RunTestsAction): run_tests,
    action_name(CreateLaneAction): create_lane,
    action_name(DeleteLaneAction): delete_lane,
    action_name(PredictConflictsAction): predict_conflicts,
    action_name(AdeActionStep): ade_action,
    action_name(AgentSessionStep): agent_session,
}


def registry() -> dict[str, ActionExecutor[Any]]:
    """Action type -> executor: a copy a runner may extend (tests add their own)."""
    return dict(EXECUTORS)


def unknown_action(action_type: str, known_types: Iterable[str]) -> str:
    """The error of a step whose action type this worker has no executor for."""
    return not_registered(
        "an action type", action_type, known_types, "update the workers to the rule's version"
    ).message
