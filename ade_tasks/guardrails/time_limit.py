"""The time limit: a run stops when it reaches its rule's `max_duration_min`."""

from __future__ import annotations

from sqlalchemy.orm import Session

from ade_tasks.guardrails.guardrail import Deadline, Guardrail
from ade_tasks.rules.rule import Rule
from ade_tasks.settings import Settings


class TimeLimit(Guardrail):
    """A run's steps are stopped (the run ends `timed_out`) after `max_duration_min`."""

    name = "time-limit"
    rule_fields = ("max_duration_min",)

    def deadline(
        self, session: Session, rule: Rule, settings: Settings, started: float
    ) -> Deadline | None:
        minutes = rule.guardrails.max_duration_min
        return Deadline(started + minutes * 60, f"the rule's max_duration_min ({minutes:g} min)")
