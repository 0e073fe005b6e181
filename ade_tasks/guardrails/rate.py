"""The rate limit: a rule's `rate_limit` (`"10/hour"`) caps how many of its runs start per
window; a trigger beyond it is recorded by dispatch as a skipped run with the reason."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ade_tasks.db.schema import RunRow
from ade_tasks.guardrails.guardrail import Admission, Guardrail
from ade_tasks.rules.rule import Rule
from ade_tasks.states import RunStatus

RATE_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


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


class RateLimit(Guardrail):
    """Admits a trigger at dispatch only while the rule's window has room; a run once admitted
    is not counted again when a worker claims it."""

    name = "rate-limit"
    rule_fields = ("rate_limit",)

    def serialized(self, rule: Rule) -> bool:
        return rule.guardrails.rate_limit is not None

    def admit(self, admission: Admission) -> str | None:
        if admission.settings is not None:  # a claimed run was counted when it was dispatched
            return None
        return rate_limited(admission.session, admission.rule, admission.now)
