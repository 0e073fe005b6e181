"""The daily budgets of a billing code (default `auto:<rule id>`): run-seconds, tokens and
dollars per UTC day, and the cluster's run-seconds per day (`ADE_BUDGET_RUN_SECONDS_PER_DAY`).

A trigger arriving when its rule's run-seconds budget is used up is recorded by dispatch as a
skipped run with the reason; the cluster-wide cap is a worker setting, so a run claimed after
it (or its rule's token or dollar budget) was used up ends `skipped` before its first step. A
run that crosses a run-seconds budget mid-way is stopped like one that reached
max_duration_min, and an agent session may spend no more tokens or dollars than its budget
has left. The `usage` table this reads is written by the run's outcome (its seconds) and by
`Budget.charge` (what agent calls spent).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db import usage as usage_db
from ade_tasks.guardrails.guardrail import Admission, Allowance, Cost, Deadline, Guardrail
from ade_tasks.rules.rule import Rule
from ade_tasks.settings import Settings


def budget_left(session: Session, rule: Rule, cluster_cap: float | None) -> list[tuple[float, str]]:
    """Run-seconds left today under each budget that applies: (seconds, which budget)."""
    day = usage_db.day_of(datetime.now(UTC))
    left: list[tuple[float, str]] = []
    cap = rule.guardrails.budget.run_seconds_per_day
    if cap is not None:
        used = usage_db.usage_on(session, day, rule.billing_code).run_seconds
        left.append((cap - used, f"the run-seconds budget of {rule.billing_code} ({cap} s/day)"))
    if cluster_cap is not None:
        used = usage_db.usage_on(session, day).run_seconds
        left.append((cluster_cap - used, f"the cluster's run-seconds budget ({cluster_cap} s/day)"))
    return left


def budget_exhausted(session: Session, rule: Rule, cluster_cap: float | None) -> str | None:
    """Why no new run of the rule may start today (None: budget remains)."""
    for seconds, what in budget_left(session, rule, cluster_cap):
        if seconds <= 0:
            return f"skipped: {what} is used up for today (UTC); it resets at midnight UTC"
    budget = rule.guardrails.budget
    if budget.tokens_per_day is None and budget.cost_per_day_usd is None:
        return None
    used = usage_db.usage_on(session, usage_db.day_of(datetime.now(UTC)), rule.billing_code)
    for cap, spent, what in (
        (budget.tokens_per_day, used.tokens, "token budget"),
        (budget.cost_per_day_usd, used.cost_usd, "cost budget (USD)"),
    ):
        if cap is not None and spent >= cap:
            return (
                f"skipped: the {what} of {rule.billing_code} ({cap:g}/day) is used up for "
                "today (UTC); it resets at midnight UTC"
            )
    return None


class Budget(Guardrail):
    """The daily budgets: admission, the run-seconds deadline, agents' allowance and charge."""

    name = "budget"
    rule_fields = ("budget",)

    def admit(self, admission: Admission) -> str | None:
        rule, settings = admission.rule, admission.settings
        if settings is None:
            # At dispatch only a rule with a run-seconds budget is checked (a read per batch
            # and rule); the worker checks every budget when it claims the run.
            if rule.guardrails.budget.run_seconds_per_day is None:
                return None
            return budget_exhausted(admission.session, rule, None)
        return budget_exhausted(admission.session, rule, settings.budget_run_seconds_per_day)

    def deadline(
        self, session: Session, rule: Rule, settings: Settings, started: float
    ) -> Deadline | None:
        """The earliest of the run-seconds budgets (the rule's, then the cluster's)."""
        earliest: Deadline | None = None
        for left, what in budget_left(session, rule, settings.budget_run_seconds_per_day):
            if earliest is None or started + left < earliest.at:
                earliest = Deadline(started + left, what)
        return earliest

    def allowance(self, session: Session, rule: Rule) -> Allowance:
        """What the rule's token and dollar budgets have left today."""
        budget = rule.guardrails.budget
        if budget.tokens_per_day is None and budget.cost_per_day_usd is None:
            return Allowance()
        used = usage_db.usage_on(session, usage_db.day_of(utcnow()), rule.billing_code)
        return Allowance(
            None if budget.tokens_per_day is None else max(0, budget.tokens_per_day - used.tokens),
            None
            if budget.cost_per_day_usd is None
            else max(0.0, budget.cost_per_day_usd - used.cost_usd),
        )

    def charge(self, session: Session, rule: Rule, cost: Cost) -> None:
        usage_db.add_usage(
            session,
            rule.billing_code,
            usage_db.day_of(utcnow()),
            tokens=cost.tokens,
            cost_usd=cost.cost_usd,
        )
