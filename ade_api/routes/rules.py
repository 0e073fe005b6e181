"""Rules and manual runs of them."""

from __future__ import annotations

from typing import Annotated, Any
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool

from ade_api.deps import ServicesDep, SessionDep
from ade_api.schemas import (
    FireTime,
    ManualRunAccepted,
    ManualRunRequest,
    OccurrenceOut,
    Problem,
    RuleOut,
    SchedulePreview,
    ScheduleTriggerPreview,
    TrustGranted,
    TrustRequest,
)
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.schema import utcnow
from ade_tasks.dispatch import TriggerEvent, dispatch
from ade_tasks.rules.models import ScheduleTrigger
from ade_tasks.scheduling import ScheduleSpec, next_fire_times

router = APIRouter(prefix="/api/v1/rules", tags=["rules"])
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "no such rule"}
}


@router.get("")
def list_rules(session: SessionDep) -> list[RuleOut]:
    """Every rule, by id."""
    return [RuleOut.model_validate(row) for row in rules_db.list_rules(session)]


@router.post("/trust", responses=NOT_FOUND)
def trust_shared_file(request: TrustRequest, services: ServicesDep) -> TrustGranted:
    """Trust a reviewed shared rules file; its rules may run until the file changes again."""
    with services.session_factory.begin() as session:
        released = rules_db.trust_hash(session, request.content_hash, request.by)
    return TrustGranted(content_hash=request.content_hash, rules=released)


@router.get("/{rule_id}", responses=NOT_FOUND)
def get_rule(rule_id: str, session: SessionDep) -> RuleOut:
    """One rule with its validated document."""
    return RuleOut.model_validate(rules_db.get_rule(session, rule_id))


@router.get("/{rule_id}/schedule", responses=NOT_FOUND)
def schedule_preview(
    rule_id: str, session: SessionDep, count: Annotated[int, Query(ge=1, le=100)] = 10
) -> SchedulePreview:
    """The next fire times of the rule's schedule triggers, in UTC and in each trigger's zone."""
    row = rules_db.get_rule(session, rule_id)
    rule = rules_db.load_rule(row)
    now = utcnow()
    triggers = []
    for index, trigger in enumerate(rule.triggers):
        if isinstance(trigger, ScheduleTrigger):
            spec = ScheduleSpec(rule_id, index, trigger.cron, trigger.timezone)
            zone = ZoneInfo(trigger.timezone)
            times = [
                FireTime(utc=t, local=t.astimezone(zone)) for t in next_fire_times(spec, now, count)
            ]
            triggers.append(
                ScheduleTriggerPreview(
                    trigger_index=index, cron=trigger.cron, timezone=trigger.timezone, next=times
                )
            )
    return SchedulePreview(rule_id=rule_id, enabled=row.enabled, triggers=triggers)


@router.get("/{rule_id}/occurrences", responses=NOT_FOUND)
def occurrences(
    rule_id: str, session: SessionDep, limit: Annotated[int, Query(ge=1, le=500)] = 100
) -> list[OccurrenceOut]:
    """Past schedule occurrences of the rule, newest first: fired (with the run), skipped (with
    the reason) or missed. Answers "did the 03:00 run happen, and if not, why?"."""
    rules_db.get_rule(session, rule_id)
    rows = occ_db.list_for_rule(session, rule_id, limit)
    return [OccurrenceOut.model_validate(row) for row in rows]


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
) -> ManualRunAccepted:
    """Start a manual run. A repeated `Idempotency-Key` returns the run the first call created.

    If the broker is unreachable the run is still recorded (`sent: false`); the recovery sweep
    sends it when the broker is back, so nothing is lost.
    """
    body = body or ManualRunRequest()
    trigger = TriggerEvent.manual(body.inputs, key=idempotency_key, by=body.requested_by)
    result = await run_in_threadpool(
        dispatch, services.session_factory, services.sender, rule_id, trigger
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
