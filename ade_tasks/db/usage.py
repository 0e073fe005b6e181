"""Query functions for usage per billing code and UTC day (what budget caps are checked against)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, func, or_, select, text
from sqlalchemy.orm import Session

from ade_tasks.db.schema import UsageRow
from ade_tasks.errors import InvalidInputError

_ADD = text(
    "INSERT INTO usage (billing_code, day, run_seconds, tokens, cost_usd) "
    "VALUES (:billing_code, :day, :run_seconds, :tokens, :cost_usd) "
    "ON CONFLICT (billing_code, day) DO UPDATE SET "
    "run_seconds = usage.run_seconds + excluded.run_seconds, "
    "tokens = usage.tokens + excluded.tokens, cost_usd = usage.cost_usd + excluded.cost_usd"
)


@dataclass(frozen=True)
class Charge:
    """Run-seconds a finished run adds to its billing code's usage of the day."""

    billing_code: str
    day: str
    run_seconds: float


#: `_ADD` for one run, as the tail of the statement that records the run's outcome: a CTE that
#: adds only when the CTE `finished` (the outcome's UPDATE) returned the run.
CHARGE_CTE = (
    "charged AS (INSERT INTO usage (billing_code, day, run_seconds, tokens, cost_usd) "
    "SELECT :billing_code, :day, :run_seconds, 0, 0 FROM finished "
    "ON CONFLICT (billing_code, day) DO UPDATE SET "
    "run_seconds = usage.run_seconds + excluded.run_seconds)"
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


# --- reporting -------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsageFilter:
    """Which usage rows a report covers: one billing code (or all), days in [since, until]."""

    billing_code: str | None = None
    since: str | None = None  # YYYY-MM-DD, inclusive
    until: str | None = None  # YYYY-MM-DD, inclusive

    def conditions(self) -> list[ColumnElement[bool]]:
        where: list[ColumnElement[bool]] = []
        if self.billing_code is not None:
            where.append(UsageRow.billing_code == self.billing_code)
        if self.since is not None:
            where.append(UsageRow.day >= self.since)
        if self.until is not None:
            where.append(UsageRow.day <= self.until)
        return where


def _encode_cursor(row: UsageRow) -> str:
    raw = f"{row.day}|{row.billing_code}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    day, sep, code = raw.partition("|")
    if not sep or len(day) != 10:
        raise InvalidInputError(
            f"cursor {cursor!r} is not valid; pass the `next_cursor` of a previous page"
        )
    return day, code


def list_usage(
    session: Session, filters: UsageFilter, *, limit: int = 500, cursor: str | None = None
) -> tuple[Sequence[UsageRow], str | None]:
    """Usage rows (one per billing code and day), newest day first and by billing code within a
    day, a page at a time: the page and the cursor of the next (None: last page)."""
    stmt = select(UsageRow).where(*filters.conditions())
    if cursor is not None:
        day, code = _decode_cursor(cursor)
        stmt = stmt.where(
            or_(UsageRow.day < day, and_(UsageRow.day == day, UsageRow.billing_code > code))
        )
    stmt = stmt.order_by(UsageRow.day.desc(), UsageRow.billing_code).limit(limit + 1)
    rows = session.scalars(stmt).all()
    if len(rows) > limit:
        return rows[:limit], _encode_cursor(rows[limit - 1])
    return rows, None


def usage_totals(session: Session, filters: UsageFilter) -> Usage:
    """The sums over every row the filter covers (not just one page)."""
    stmt = select(
        func.coalesce(func.sum(UsageRow.run_seconds), 0.0),
        func.coalesce(func.sum(UsageRow.tokens), 0),
        func.coalesce(func.sum(UsageRow.cost_usd), 0.0),
    ).where(*filters.conditions())
    seconds, tokens, cost = session.execute(stmt).one()
    return Usage(float(seconds), int(tokens), float(cost))
