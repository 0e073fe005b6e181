"""Guardrails the engine holds every run to, beyond the overlap policy (see `dispatch`):
rate limits and run-seconds budgets at admission and mid-run, and the approval gate.

Budgets count run-seconds per billing code (default `auto:<rule id>`) and UTC day, and across
the cluster (`ADE_BUDGET_RUN_SECONDS_PER_DAY`). A trigger arriving when its rule's budget is
used up is recorded by dispatch as a skipped run with the reason; the cluster-wide cap is a
worker setting, so a run claimed after it was used up ends `skipped` before its first step.
A run that crosses either budget mid-way is stopped like one that reached max_duration_min.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ade_tasks.ade_actions import CATALOG
from ade_tasks.db import usage as usage_db
from ade_tasks.db.schema import RunRow
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import AdeActionStep, AgentSessionStep
from ade_tasks.states import RunStatus

RATE_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
#: Action types that change nothing outside the run; `require_human` lets them run before the
#: gate (so may an `ade-action` whose catalog entry is side-effect free).
SIDE_EFFECT_FREE = frozenset({"predict-conflicts"})


def approval_gate(rule: Rule) -> int | None:
    """Before which step index the run waits for a human (None: it never waits).

    `verify_before_publish` waits after the last step, before publishing; `require_human`
    waits before the first step that has a side effect.
    """
    actions = rule.execution.actions
    if rule.guardrails.verify_before_publish:
        return len(actions)
    if not rule.guardrails.require_human:
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
    return getattr(action, "type", None) in SIDE_EFFECT_FREE


def parse_rate(rate: str) -> tuple[int, timedelta]:
    """`"10/hour"` -> (10, one hour)."""
    match = re.fullmatch(r"(\d+)/(second|minute|hour|day)", rate)
    if not match:
        raise ValueError(f"rate_limit {rate!r} must look like 10/hour")
    return int(match[1]), timedelta(seconds=RATE_UNITS[match[2]])


def rate_limited(session: Session, rule: Rule, now: datetime) -> str | None:
    """Why a new run of the rule exceeds its `rate_limit` (None: it does not).

    Counts the rule's runs queued within the window that were not skipped; call under the
    rule's lock so racing triggers see each other.
    """
    if not rule.guardrails.rate_limit:
        return None
    count, window = parse_rate(rule.guardrails.rate_limit)
    recent = session.scalar(
        select(func.count())
        .select_from(RunRow)
        .where(
            RunRow.rule_id == rule.id,
            RunRow.queued_at > now - window,
            RunRow.status != RunStatus.SKIPPED,
        )
    )
    if int(recent or 0) < count:
        return None
    return (
        f"skipped by the rate limit {rule.guardrails.rate_limit}: rule {rule.id!r} already "
        f"started {recent} run(s) in the last {window}"
    )


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
