"""Run history."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from ade_api.deps import Services, ServicesDep, SessionDep
from ade_api.schemas import Decision, Problem, ReviewMove, RunDetail, RunOut, RunPage
from ade_tasks.approvals import decide_run
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.schema import QueueStatus, RunStatus
from ade_tasks.errors import InvalidInputError, NotFoundError
from ade_tasks.review import QUEUE_ACTIONS

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])


@router.get("", responses={422: {"model": Problem}})
def list_runs(
    session: SessionDep,
    rule: str | None = None,
    status: RunStatus | None = None,
    trigger_type: str | None = None,
    since: Annotated[datetime | None, Query(description="ISO 8601 with a time zone")] = None,
    queue_status: QueueStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=runs_db.MAX_PAGE)] = runs_db.DEFAULT_PAGE,
    cursor: str | None = None,
) -> RunPage:
    """Runs, newest first, filtered; follow `next_cursor` for older ones."""
    if since is not None and since.tzinfo is None:
        raise InvalidInputError(
            f"since={since.isoformat()} has no time zone; add one, e.g. Z or +00:00"
        )
    filters = runs_db.RunFilter(rule, status, trigger_type, since, queue_status)
    rows, next_cursor = runs_db.list_runs(session, filters, limit=limit, cursor=cursor)
    return RunPage(items=[RunOut.of(row) for row in rows], next_cursor=next_cursor)


def _check_id(run_id: str) -> None:
    try:
        uuid.UUID(run_id)
    except ValueError:
        raise NotFoundError(f"run id {run_id!r} is not a run id (run ids are UUIDs)") from None


@router.get("/{run_id}", responses={404: {"model": Problem}, 422: {"model": Problem}})
def get_run(run_id: str, session: SessionDep) -> RunDetail:
    """One run with its steps and approvals."""
    _check_id(run_id)
    row = runs_db.get_run(session, run_id)
    steps = list(runs_db.list_steps(session, run_id))
    return RunDetail.with_steps(row, steps, list(approvals_db.approvals_of(session, run_id)))


DECISION_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "no such run"},
    409: {"model": Problem, "description": "the run is not waiting for an approval"},
}


@router.post("/{run_id}/approve", responses=DECISION_ERRORS)
async def approve_run(run_id: str, decision: Decision, services: ServicesDep) -> RunOut:
    """Approve a waiting run: it is queued again and resumes where it stopped."""
    return await _decide(services, run_id, decision, approve=True)


@router.post("/{run_id}/reject", responses=DECISION_ERRORS)
async def reject_run(run_id: str, decision: Decision, services: ServicesDep) -> RunOut:
    """Reject a waiting run: it ends `cancelled` with the reason."""
    return await _decide(services, run_id, decision, approve=False)


async def _decide(services: Services, run_id: str, decision: Decision, *, approve: bool) -> RunOut:
    _check_id(run_id)
    row = await run_in_threadpool(
        decide_run, services.session_factory, services.sender, run_id,
        approve=approve, by=decision.by, note=decision.note,
    )  # fmt: skip
    return RunOut.of(row)


@router.post("/{run_id}/review", responses=DECISION_ERRORS)
def move_in_review_queue(run_id: str, move: ReviewMove, services: ServicesDep) -> RunOut:
    """Move a finished run in the review queue: `ignore`, `archive` or `approve`."""
    _check_id(run_id)
    target = QUEUE_ACTIONS.get(move.action)
    if target is None:
        known = ", ".join(QUEUE_ACTIONS)
        raise InvalidInputError(f"review action {move.action!r} is unknown; use one of {known}")
    with services.session_factory.begin() as session:
        row = runs_db.move_in_review_queue(session, run_id, target)
        return RunOut.of(row)
