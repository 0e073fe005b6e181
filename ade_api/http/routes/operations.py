"""What operators look after besides runs: pending inputs, lanes and scheduled cleanups."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from ade_api.http.auth import actor
from ade_api.http.deps import ServicesDep, SessionDep
from ade_api.http.schemas.inputs import AnsweredInput, InputAnswer
from ade_api.http.schemas.lanes import CleanupOut, LaneOut
from ade_api.http.schemas.params import RowId
from ade_api.http.schemas.problem import problem_responses
from ade_api.http.schemas.runs import ApprovalOut, RunOut
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import lanes as lanes_db
from ade_tasks.runs.approvals import answer_input
from ade_tasks.states import ApprovalStatus, CleanupStatus, LaneStatus

router = APIRouter(prefix="/api/v1", tags=["operations"])


@router.get("/inputs")
@router.get("/approvals", deprecated=True, summary="List Inputs (old name)")
def list_inputs(
    session: SessionDep, status: ApprovalStatus | None = ApprovalStatus.PENDING
) -> list[ApprovalOut]:
    """Inputs runs wait for (an agent's tool call, or a gate before a step), newest first;
    pending ones unless `status` says otherwise."""
    rows = approvals_db.list_approvals(session, status.value if status else None)
    return [ApprovalOut.model_validate(row) for row in rows]


INPUT_ERRORS = problem_responses(
    {
        404: "no such input",
        409: "the input is not pending (already answered)",
        422: "accept_for_session for a gate, or a bad body",
    }
)


@router.post("/inputs/{input_id}/answer", responses=INPUT_ERRORS)
async def answer(
    input_id: RowId, body: InputAnswer, request: Request, services: ServicesDep
) -> AnsweredInput:
    """Answer a pending input; an accepted or declined tool call re-queues the session."""
    row, run = await run_in_threadpool(
        answer_input, services.session_factory, services.sender, input_id, body.answer,
        by=actor(request, body.by), note=body.note,
    )  # fmt: skip
    return AnsweredInput(input=ApprovalOut.model_validate(row), run=RunOut.of(run))


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


CLEANUP_ERRORS = problem_responses(
    {
        404: "no such cleanup",
        409: "the cleanup already started or ended",
    }
)


@router.post("/cleanups/{cleanup_id}/cancel", responses=CLEANUP_ERRORS)
def cancel_cleanup(cleanup_id: RowId, services: ServicesDep) -> CleanupOut:
    """Cancel a scheduled cleanup; its lane stays."""
    with services.session_factory.begin() as session:
        return CleanupOut.model_validate(lanes_db.cancel_cleanup(session, cleanup_id))
