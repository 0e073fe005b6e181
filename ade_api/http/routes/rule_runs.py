"""Manual runs of a rule: now, through the one dispatch, or scheduled to fire once later."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response, status
from fastapi.concurrency import run_in_threadpool

from ade_api.http.auth import actor, forcing_admin
from ade_api.http.deps import Services, ServicesDep
from ade_api.http.routes.rules import NOT_FOUND
from ade_api.http.schemas.manual_runs import ManualRunAccepted, ManualRunRequest, ScheduledRunOut
from ade_api.http.schemas.problem import Problem
from ade_tasks.clock import utcnow
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.schedule.one_shots import schedule_manual_run

router = APIRouter(prefix="/api/v1/rules", tags=["rules"])


@router.post(
    "/{rule_id}/runs",
    status_code=status.HTTP_202_ACCEPTED,
    responses={**NOT_FOUND, 409: {"model": Problem, "description": "inputs refused"}},
)
async def start_manual_run(
    rule_id: str,
    request: Request,
    response: Response,
    services: ServicesDep,
    body: ManualRunRequest | None = None,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> ManualRunAccepted | ScheduledRunOut:
    """Start a manual run. A repeated `Idempotency-Key` returns the run the first call created.

    While the cluster's kill switch is on (`ADE_DISABLE_AUTOMATIONS=1`) it is refused with 409,
    unless an admin token sends `force: true` (the run records who forced it; 403 for others).

    With `run_at` or `delay_seconds` the run is scheduled instead (202 with the scheduled run):
    the beats fire it once at that time, with the inputs checked now and again when it fires;
    `GET /api/v1/scheduled-runs` lists it and `POST /api/v1/scheduled-runs/{id}/cancel` cancels
    it until it fires.

    If the broker is unreachable the run is still recorded (`sent: false`); the recovery sweep
    sends it when the broker is back, so nothing is lost. A database connection lost under the
    call (a restart, a failover) is replaced and the dispatch repeated, storing the run once; a
    database that stays away gives 503 with `Retry-After` (send the request again with an
    `Idempotency-Key` to be sure it starts one run).
    """
    body = body or ManualRunRequest()
    run_at = body.scheduled_for(utcnow())
    if run_at is not None:
        return await run_in_threadpool(
            schedule_run, services, request, response, rule_id, body, run_at, idempotency_key
        )
    # Without an Idempotency-Key the request's own id is the key, so the dispatch can be
    # repeated safely when the database connection dies under it (stored once either way).
    key = idempotency_key or f"request:{uuid.uuid4().hex}"
    forced_by = forcing_admin(request, body.force, body.requested_by)
    # The requester is the token's name (with the caller's `requested_by` for a shared token),
    # as for a scheduled run: never only what the caller says.
    by = actor(request, body.requested_by)
    trigger = TriggerEvent.manual(body.inputs, key=key, by=by, forced_by=forced_by)
    result = await run_in_threadpool(
        services.dispatch, rule_id, trigger, own_key=idempotency_key is None
    )
    run_url = str(request.url_for("get_run", run_id=result.run.id))
    response.headers["Location"] = run_url
    if not result.created:
        message = "a run with this Idempotency-Key already exists; returning it"
    elif result.run.status == "skipped":
        message = result.run.error or "skipped"
    elif result.run.buffered:
        message = "buffered by the rule's overlap policy: it starts when an active run ends"
    elif result.sent:
        message = "queued"
    else:
        message = (
            f"run recorded but not sent: {result.send_error}. "
            "It stays queued and the recovery sweep sends it when the broker is reachable."
        )
    return ManualRunAccepted(
        run_id=result.run.id,
        status=result.run.status,
        created=result.created,
        sent=result.sent,
        message=message,
        run_url=run_url,
    )


def schedule_run(
    services: Services,
    request: Request,
    response: Response,
    rule_id: str,
    body: ManualRunRequest,
    run_at: datetime,
    idempotency_key: str | None,
) -> ScheduledRunOut:
    """Store a scheduled manual run (`ade_tasks.schedule.one_shots.schedule_manual_run`)."""
    with services.session_factory.begin() as session:
        row, _created = schedule_manual_run(
            session,
            rule_id,
            run_at,
            inputs=body.inputs,
            requested_by=actor(request, body.requested_by),
            catchup_window=body.catchup_window,
            key=idempotency_key,
        )
        scheduled = ScheduledRunOut.model_validate(row)
    response.headers["Location"] = str(
        request.url_for("get_scheduled_run", scheduled_id=scheduled.id)
    )
    return scheduled
