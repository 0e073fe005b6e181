"""Usage per billing code and UTC day: run time, agent tokens and cost (what budgets count)."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from ade_api.http.deps import SessionDep
from ade_api.http.schemas.params import Base64Cursor
from ade_api.http.schemas.problem import problem_responses
from ade_tasks.db import usage as usage_db
from ade_tasks.errors import InvalidInputError

router = APIRouter(prefix="/api/v1/usage", tags=["usage"])
INVALID = problem_responses({422: "bad date range or cursor"})


class UsageDayOut(BaseModel):
    """What one billing code used on one UTC day."""

    model_config = ConfigDict(from_attributes=True)

    billing_code: str
    day: str = Field(description="YYYY-MM-DD, UTC")
    run_seconds: float
    tokens: int
    cost_usd: float


class UsageTotals(BaseModel):
    """The sums over every row the filter covers (all pages)."""

    run_seconds: float
    tokens: int
    cost_usd: float


class UsagePage(BaseModel):
    """Usage rows, newest day first (by billing code within a day), and their totals."""

    billing_code: str | None
    since: date | None
    until: date | None
    items: list[UsageDayOut]
    totals: UsageTotals
    next_cursor: str | None = Field(description="pass as `cursor` to get the next page")


@router.get("", responses=INVALID)
def list_usage(
    session: SessionDep,
    billing_code: Annotated[str | None, Query(max_length=128)] = None,
    since: Annotated[date | None, Query(description="first UTC day, inclusive")] = None,
    until: Annotated[date | None, Query(description="last UTC day, inclusive")] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
    cursor: Base64Cursor = None,
) -> UsagePage:
    """Usage per billing code and UTC day (run seconds, agent tokens, cost in USD), optionally of
    one billing code and days from `since` through `until`, with the totals of the whole range."""
    if since is not None and until is not None and since > until:
        raise InvalidInputError(f"since ({since}) is after until ({until}); swap them")
    filters = usage_db.UsageFilter(
        billing_code,
        since.isoformat() if since else None,
        until.isoformat() if until else None,
    )
    rows, next_cursor = usage_db.list_usage(session, filters, limit=limit, cursor=cursor)
    totals = usage_db.usage_totals(session, filters)
    return UsagePage(
        billing_code=billing_code,
        since=since,
        until=until,
        items=[UsageDayOut.model_validate(row) for row in rows],
        totals=UsageTotals(
            run_seconds=totals.run_seconds, tokens=totals.tokens, cost_usd=totals.cost_usd
        ),
        next_cursor=next_cursor,
    )
