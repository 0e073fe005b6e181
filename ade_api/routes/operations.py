"""What operators look after besides runs: pending approvals, lanes and scheduled cleanups."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ade_api.deps import ServicesDep, SessionDep
from ade_api.schemas import ApprovalOut, CleanupOut, LaneOut, Problem
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import lanes as lanes_db
from ade_tasks.db.schema import ApprovalStatus, CleanupStatus, LaneStatus

router = APIRouter(prefix="/api/v1", tags=["operations"])


@router.get("/approvals")
def list_approvals(
    session: SessionDep, status: ApprovalStatus | None = ApprovalStatus.PENDING
) -> list[ApprovalOut]:
    """Approvals, newest first; pending ones unless `status` says otherwise."""
    rows = approvals_db.list_approvals(session, status.value if status else None)
    return [ApprovalOut.model_validate(row) for row in rows]


@router.get("/lanes")
def list_lanes(session: SessionDep, status: LaneStatus | None = LaneStatus.ACTIVE) -> list[LaneOut]:
    """Lanes, newest first; active ones unless `status` says otherwise."""
    rows = lanes_db.list_lanes(session, status.value if status else None)
    return [LaneOut.model_validate(row) for row in rows]


@router.get("/cleanups")
def list_cleanups(session: SessionDep, status: CleanupStatus | None = None) -> list[CleanupOut]:
    """Deferred lane deletions, soonest first."""
    rows = lanes_db.list_cleanups(session, status.value if status else None)
    return [CleanupOut.model_validate(row) for row in rows]


CLEANUP_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "no such cleanup"},
    409: {"model": Problem, "description": "the cleanup already started or ended"},
}


@router.post("/cleanups/{cleanup_id}/cancel", responses=CLEANUP_ERRORS)
def cancel_cleanup(cleanup_id: int, services: ServicesDep) -> CleanupOut:
    """Cancel a scheduled cleanup; its lane stays."""
    with services.session_factory.begin() as session:
        return CleanupOut.model_validate(lanes_db.cancel_cleanup(session, cleanup_id))
