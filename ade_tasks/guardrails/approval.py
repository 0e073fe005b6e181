"""The approval gate: `require_human` makes a run wait for an operator before its first step
with a side effect, `verify_before_publish` before it publishes."""

from __future__ import annotations

from ade_tasks.guardrails.guardrail import Guardrail
from ade_tasks.rules.ade_actions import CATALOG
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import AdeActionStep, AgentSessionStep, Step


def approval_gate(rule: Rule) -> int | None:
    """Before which step index the run waits for a human (None: it never waits).

    `verify_before_publish` waits after the last step, before publishing; `require_human`
    waits before the first step that has a side effect.
    """
    actions = rule.execution.actions
    if rule.guardrails.verify_before_publish:
        return len(actions)
    if rule.guardrails.human_approval() is None:
        return None
    for index, action in enumerate(actions):
        if not is_side_effect_free(action):
            return index
    return len(actions)


def is_side_effect_free(action: object) -> bool:
    """Does the step change nothing outside the run (so it may run before the approval gate)?"""
    if isinstance(action, AdeActionStep):
        spec = CATALOG.get(action.action)
        return spec is not None and spec.side_effect_free
    if isinstance(action, AgentSessionStep):  # plan mode: read-only tools and the report
        return action.permission_mode == "plan"
    return isinstance(action, Step) and action.side_effect_free


class ApprovalGate(Guardrail):
    """Parks the run in `waiting` at its gate until an operator approves or rejects it."""

    name = "approval-gate"
    rule_fields = ("require_human", "verify_before_publish")

    def gate(self, rule: Rule) -> int | None:
        return approval_gate(rule)
