"""A toy action type: `shout` upper-cases its templated `text` into the step's output; `SHOUT`
declares the two as one action type."""

from __future__ import annotations

from typing import Literal

from ade_tasks.rules.steps import Step
from ade_tasks.states import StepStatus
from ade_workers.actions.executor import StepContext, StepOutcome
from ade_workers.actions.registry import ActionType


class ShoutAction(Step):
    """Say `text` loudly."""

    type: Literal["shout"]
    text: str
    templated = ("text",)
    side_effect_free = True  # it may run before a `require_human` gate


def shout(action: ShoutAction, context: StepContext) -> StepOutcome:
    """The executor: its output is the rendered text, upper-cased."""
    return StepOutcome(StepStatus.SUCCEEDED, output=action.text.upper())


SHOUT = ActionType(ShoutAction, shout)
