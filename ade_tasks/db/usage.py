"""Query functions for usage per billing code and UTC day (what budget caps are checked against)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from ade_tasks.db.schema import UsageRow

_ADD = text(
    "INSERT INTO usage (billing_code, day, run_seconds, tokens, cost_usd) "
    "VALUES (:billing_code, :day, :run_seconds, :tokens, :cost_usd) "
    "ON CONFLICT (billing_code, day) DO UPDATE SET "
    "run_seconds = usage.run_seconds + excluded.run_seconds, "
    "tokens = usage.tokens + excluded.tokens, cost_usd = usage.cost_usd + excluded.cost_usd"
)


def day_of(moment: datetime) -> str:
    """The UTC day a moment counts towards."""
    return moment.date().isoformat()


@dataclass(frozen=True)
class Usage:
    """What was used on one day."""

    run_seconds: float = 0.0
    tokens: int = 0
    cost_usd: float = 0.0


def add_usage(
    session: Session,
    billing_code: str,
    day: str,
    *,
    run_seconds: float = 0.0,
    tokens: int = 0,
    cost_usd: float = 0.0,
) -> None:
    """Add to a billing code's usage of the day (one atomic upsert; concurrent runs add up)."""
    session.execute(
        _ADD,
        {
            "billing_code": billing_code,
            "day": day,
            "run_seconds": run_seconds,
            "tokens": tokens,
            "cost_usd": cost_usd,
        },
    )


def usage_on(session: Session, day: str, billing_code: str | None = None) -> Usage:
    """One billing code's usage of the day, or everyone's when `billing_code` is None."""
    stmt = select(
        func.coalesce(func.sum(UsageRow.run_seconds), 0.0),
        func.coalesce(func.sum(UsageRow.tokens), 0),
        func.coalesce(func.sum(UsageRow.cost_usd), 0.0),
    ).where(UsageRow.day == day)
    if billing_code is not None:
        stmt = stmt.where(UsageRow.billing_code == billing_code)
    seconds, tokens, cost = session.execute(stmt).one()
    return Usage(float(seconds), int(tokens), float(cost))
