"""Scheduled runs: one-shot runs waiting for their time (rule triggers and scheduled manual
runs), listed and cancelled before they fire."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from ade_api.http.auth import actor
from ade_api.http.deps import ServicesDep, SessionDep
from ade_api.http.schemas.manual_runs import ScheduledRunOut
from ade_api.http.schemas.problem import Problem, problem_responses
from ade_api.http.schemas.runs import RunCancel
from ade_tasks.db import one_shots as once_db
from ade_tasks.states import OneShotStatus

router = APIRouter(prefix="/api/v1/scheduled-runs", tags=["scheduled runs"])
NOT_FOUND = problem_responses({404: "no such scheduled run"})


@router.get("")
def list_scheduled_runs(
    session: SessionDep,
    rule_id: str | None = None,
    status: Annotated[list[OneShotStatus] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[ScheduledRunOut]:
    """Scheduled runs, soonest first; `status=pending` (repeatable) lists those still to fire."""
    rows = once_db.list_scheduled(
        session, rule_id=rule_id, statuses=[s.value for s in status or []], limit=limit
    )
    return [ScheduledRunOut.model_validate(row) for row in rows]


@router.get("/{scheduled_id}", responses=NOT_FOUND)
def get_scheduled_run(scheduled_id: str, session: SessionDep) -> ScheduledRunOut:
    """One scheduled run: when it fires, and once it did, its run (or why it did not)."""
    return ScheduledRunOut.model_validate(once_db.get_scheduled(session, scheduled_id))


@router.post(
    "/{scheduled_id}/cancel",
    responses={**NOT_FOUND, 409: {"model": Problem, "description": "already claimed or fired"}},
)
def cancel_scheduled_run(
    scheduled_id: str, request: Request, services: ServicesDep, body: RunCancel | None = None
) -> ScheduledRunOut:
    """Cancel a scheduled run that has not fired (409 once a beat claimed it)."""
    by = actor(request, (body or RunCancel()).by)
    with services.session_factory.begin() as session:
        return ScheduledRunOut.model_validate(once_db.cancel(session, scheduled_id, by))
