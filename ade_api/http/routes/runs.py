"""Run history, a run's events (JSON, or followed live as Server-Sent Events), cancel, retry."""

from __future__ import annotations

import logging
import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from ade_api.http import run_control
from ade_api.http.auth import actor
from ade_api.http.deps import Services, ServicesDep, SessionDep
from ade_api.http.follow import follow_run, hub_of
from ade_api.http.schemas.params import Base64Cursor, Instant, TriggerTypeFilter
from ade_api.http.schemas.problem import Problem, Responses, problem_responses
from ade_api.http.schemas.runs import (
    Decision,
    ReviewMove,
    RunCancel,
    RunCancelled,
    RunDetail,
    RunEventOut,
    RunOut,
    RunPage,
    RunRetried,
    RunRetry,
)
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import run_views as run_views_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import threads as threads_db
from ade_tasks.errors import InvalidInputError, NotFoundError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.triggers import KNOWN_TRIGGER_TYPES, canonical_trigger_type
from ade_tasks.runs.approvals import decide_run
from ade_tasks.runs.review import QUEUE_ACTIONS
from ade_tasks.states import QueueStatus, RunStatus

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])
#: A run id (a lowercase UUID) or the start of one.
RUN_ID_PREFIX = "^[0-9a-f-]{1,36}$"


@router.get("", responses={422: {"model": Problem}})
def list_runs(
    session: SessionDep,
    rule: str | None = None,
    status: RunStatus | None = None,
    trigger_type: TriggerTypeFilter = None,
    since: Annotated[Instant | None, Query(description="ISO 8601 with a time zone")] = None,
    queue_status: QueueStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=run_views_db.MAX_PAGE)] = run_views_db.DEFAULT_PAGE,
    cursor: Base64Cursor = None,
    until: Annotated[
        Instant | None, Query(description="queued before this time; ISO 8601 with a time zone")
    ] = None,
    id_prefix: Annotated[
        str | None,
        Query(pattern=RUN_ID_PREFIX, description="runs whose id starts with this (a short id)"),
    ] = None,
) -> RunPage:
    """Runs, newest first, filtered (queued in [since, until)); follow `next_cursor` for older
    ones."""
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise InvalidInputError(
                f"{name}={value.isoformat()} has no time zone; add one, e.g. Z or +00:00"
            )
    if since is not None and until is not None and since >= until:
        raise InvalidInputError(
            f"since={since.isoformat()} is not before until={until.isoformat()}; nothing matches"
        )
    if trigger_type is not None:
        trigger_type = canonical_trigger_type(trigger_type)
        if trigger_type not in KNOWN_TRIGGER_TYPES:
            known = ", ".join(sorted(KNOWN_TRIGGER_TYPES))
            raise InvalidInputError(f"trigger_type {trigger_type!r} is unknown; use one of {known}")
    filters = run_views_db.RunFilter(
        rule, status, trigger_type, since, queue_status, until, id_prefix
    )
    rows, next_cursor = run_views_db.list_runs(session, filters, limit=limit, cursor=cursor)
    return RunPage(items=[RunOut.of(row) for row in rows], next_cursor=next_cursor)


def _check_id(run_id: str) -> None:
    try:
        uuid.UUID(run_id)
    except ValueError:
        raise NotFoundError(f"run id {run_id!r} is not a run id (run ids are UUIDs)") from None


@router.get("/{run_id}", responses={404: {"model": Problem}, 422: {"model": Problem}})
def get_run(run_id: str, session: SessionDep) -> RunDetail:
    """One run with its steps, approvals, agent usage (tokens, cost), confidence and the
    capability reports of its CLI agent sessions."""
    _check_id(run_id)
    row = runs_db.get_run(session, run_id)
    steps = list(run_steps_db.list_steps(session, run_id))
    capabilities = [data for _, data in run_events_db.events_of(session, run_id, CAPABILITIES)]
    return RunDetail.with_steps(
        row,
        steps,
        list(approvals_db.approvals_of(session, run_id)),
        agent_usage=run_views_db.agent_usage(session, run_id, steps),
        capabilities=capabilities,
        threads=[thread.as_dict() for thread in threads_db.threads_of_run(session, run_id)],
    )


CAPABILITIES = "agent.capabilities"


DECISION_ERRORS = problem_responses(
    {
        404: "no such run",
        409: "the run is not waiting for an approval",
    }
)


@router.post("/{run_id}/approve", responses=DECISION_ERRORS)
async def approve_run(
    run_id: str, decision: Decision, request: Request, services: ServicesDep
) -> RunOut:
    """Approve a waiting run: it is queued again and resumes where it stopped."""
    return await _decide(services, request, run_id, decision, approve=True)


@router.post("/{run_id}/reject", responses=DECISION_ERRORS)
async def reject_run(
    run_id: str, decision: Decision, request: Request, services: ServicesDep
) -> RunOut:
    """Reject a waiting run: it ends `cancelled` with the reason."""
    return await _decide(services, request, run_id, decision, approve=False)


async def _decide(
    services: Services, request: Request, run_id: str, decision: Decision, *, approve: bool
) -> RunOut:
    _check_id(run_id)
    row = await run_in_threadpool(
        decide_run, services.session_factory, services.sender, run_id,
        approve=approve, by=actor(request, decision.by), note=decision.note,
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


# --- cancel and retry -------------------------------------------------------------------------

CANCEL_ERRORS = problem_responses({404: "no such run", 409: "the run already finished"})


@router.post("/{run_id}/cancel", responses=CANCEL_ERRORS)
async def cancel_run(
    run_id: str, request: Request, services: ServicesDep, body: RunCancel | None = None
) -> RunCancelled:
    """Cancel a queued, waiting or running run (409 once it finished).

    A queued run is cancelled at once: its message, when a worker takes it, finds it no longer
    queued and does nothing (runs keep no Celery task id to revoke, and need none). A running
    run's worker reads the cancel from the run's row within half a second and kills everything
    the step's command started. The run gets a `run.cancelled` event.
    """
    _check_id(run_id)
    body = body or RunCancel()
    by = actor(request, body.by)
    return await run_in_threadpool(run_control.cancel_run, services, run_id, by, body.note)


RETRY_ERRORS = problem_responses(
    {
        404: "no such run (or its rule is gone)",
        409: "the run is still active, or the rule refused it",
    }
)


@router.post("/{run_id}/retry", status_code=status.HTTP_202_ACCEPTED, responses=RETRY_ERRORS)
async def retry_run(
    run_id: str,
    request: Request,
    response: Response,
    services: ServicesDep,
    body: RunRetry | None = None,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> RunRetried:
    """Start a new run of a finished run's rule with the same trigger (type and payload, plus
    `retry_of`), through the same admission and overlap checks as any trigger."""
    _check_id(run_id)
    by = actor(request, (body or RunRetry()).by)
    retried = await run_in_threadpool(run_control.retry_run, services, run_id, by, idempotency_key)
    result = retried.result
    run_url = str(request.url_for("get_run", run_id=result.run.id))
    response.headers["Location"] = run_url
    return RunRetried(
        run_id=result.run.id,
        retry_of=run_id,
        status=result.run.status,
        created=result.created,
        sent=result.sent,
        message=retried.message,
        run_url=run_url,
    )


# --- events, and following them live (Server-Sent Events) -------------------------------------

EVENT_ERRORS: Responses = {
    200: {
        "description": "the events as JSON, or with `follow=true` a `text/event-stream`",
        "content": {"text/event-stream": {}},
    },
    404: {"model": Problem, "description": "no such run"},
}


@router.get("/{run_id}/events", response_model=list[RunEventOut], responses=EVENT_ERRORS)
async def run_events(
    run_id: str,
    request: Request,
    services: ServicesDep,
    after: Annotated[int, Query(ge=0, description="only events with a larger id")] = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
    follow: bool = False,
    last_event_id: Annotated[str | None, Header()] = None,
) -> list[RunEventOut] | StreamingResponse:
    """The run's events, oldest first (page with `after` = the last id you got).

    With `follow=true`: Server-Sent Events (`id:` the event id, `event:` its kind, `data:` the
    event as JSON) - the events so far, then new ones as they are written, with `step.started` /
    `step.finished` and `run.status` as the run moves, ending with `event: end` once the run
    finished; a `: keep-alive` comment every 15 s. Reconnect with `Last-Event-ID` (or `after`).
    A running command step's output arrives as `step.output` events (`offset`, `text`; batched
    at most a second behind, masked, capped at 80,000 characters per step, the last then with
    `capped`).
    """
    _check_id(run_id)

    def read() -> list[RunEventOut]:
        with services.session_factory() as session:
            runs_db.get_run(session, run_id)
            if follow:
                return []
            rows = run_events_db.events_after(session, run_id, after, limit)
            return [RunEventOut(id=e.id, at=e.at, kind=e.kind, step_index=e.step_index,
                                data=e.data) for e in rows]  # fmt: skip

    events = await run_in_threadpool(read)
    if not follow:
        return events
    if not after and last_event_id and last_event_id.isdigit():
        after = int(last_event_id)
    return StreamingResponse(
        follow_run(request, hub_of(request, services.session_factory), run_id, after),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/{run_id}/followers", responses={404: {"model": Problem}})
async def run_followers(run_id: str, request: Request, services: ServicesDep) -> JsonObject:
    """How many clients follow the run's events on this API process."""
    _check_id(run_id)
    hub = hub_of(request, services.session_factory)
    return {"run_id": run_id, "followers": hub.followers(run_id)}
