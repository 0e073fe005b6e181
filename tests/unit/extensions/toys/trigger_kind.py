"""A toy trigger kind: `bell.rung`, started by a ring of one of its `bells`, ready when the
toy bell tower is configured as a hook."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import Trigger, TriggerDocument
from ade_tasks.triggers.matcher import Refusal, TriggerTest
from ade_tasks.triggers.readiness import DeliveryState, Readiness
from ade_tasks.triggers.registry import TriggerKind


class BellTrigger(TriggerDocument):
    """A bell rang; `bells` narrows it to those bells."""

    type: Literal["bell.rung"]
    bells: list[str] = Field(min_length=1)


def bell_matcher(source: str, payload: Mapping[str, object], /) -> TriggerTest:
    """Bell triggers against a ring: the payload names the bell."""
    bell = str(payload.get("bell"))

    def match(_rule: Rule, trigger: Trigger) -> Refusal | None:
        assert isinstance(trigger, BellTrigger)
        return None if bell in trigger.bells else Refusal("bells", f"bell {bell} is not listed")

    return match


def bell_ready(_trigger: BellTrigger, state: DeliveryState) -> Readiness:
    """Ready when the tower's hook is configured."""
    if "tower" in state.hooks:
        return "the bell tower", None
    return None, "the bell tower is not configured: set ADE_HOOKS__tower"


BELL = TriggerKind(BellTrigger, bell_ready, bell_matcher)
