"""A toy guardrail: no runs on a rule whose description asks for quiet."""

from __future__ import annotations

from ade_tasks.guardrails.guardrail import Admission, Guardrail


class QuietHours(Guardrail):
    """Refuses the runs of a rule described as `quiet`."""

    name = "quiet-hours"

    def admit(self, admission: Admission) -> str | None:
        if "quiet" in admission.rule.description:
            return f"skipped by quiet hours: rule {admission.rule.id!r} asks for quiet"
        return None
