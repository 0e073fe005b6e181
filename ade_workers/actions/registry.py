"""The action executors by action type: one module per type, and this one line per type.

Adding an action type: its model in `ade_tasks/rules/steps.py` (a `type` literal in the step
union), its executor module here in `ade_workers/actions/`, and one entry in `EXECUTORS`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ade_tasks.errors import not_registered
from ade_workers.actions.ade_action import ade_action
from ade_workers.actions.agent_session import agent_session
from ade_workers.actions.base import ActionExecutor
from ade_workers.actions.lane_actions import create_lane, delete_lane, predict_conflicts
from ade_workers.actions.run_command import run_command
from ade_workers.actions.run_tests import run_tests

#: Each executor takes its own step model; the `type` key is what pairs a step with it, a
#: pairing the type system cannot see, so the registry holds executors of any step model.
EXECUTORS: dict[str, ActionExecutor[Any]] = {
    "run-command": run_command,
    "run-tests": run_tests,
    "create-lane": create_lane,
    "delete-lane": delete_lane,
    "predict-conflicts": predict_conflicts,
    "ade-action": ade_action,
    "agent-session": agent_session,
}


def registry() -> dict[str, ActionExecutor[Any]]:
    """Action type -> executor: a copy a runner may extend (tests add their own)."""
    return dict(EXECUTORS)


def unknown_action(action_type: str, known_types: Iterable[str]) -> str:
    """The error of a step whose action type this worker has no executor for."""
    return not_registered(
        "an action type", action_type, known_types, "update the workers to the rule's version"
    ).message
