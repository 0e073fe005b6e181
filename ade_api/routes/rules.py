"""Rules and manual runs of them."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from functools import partial
from typing import Annotated, Any
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ade_api.auth import actor, forcing_admin
from ade_api.deps import Services, ServicesDep, SessionDep
from ade_api.rule_health import live_state, rule_out, set_enabled
from ade_api.schemas import (
    By,
    FireTime,
    ManualRunAccepted,
    ManualRunRequest,
    OccurrenceOut,
    Problem,
    RuleOut,
    ScheduledRunOut,
    SchedulePreview,
    ScheduleTriggerPreview,
    TrustGranted,
    TrustRequest,
)
from ade_tasks.clock import utcnow
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import rule_edits as rule_edits_db
from ade_tasks.db import rule_trust as rule_trust_db
from ade_tasks.db import rule_versions as rule_versions_db
from ade_tasks.db import rules as rules_db
from ade_tasks.dispatch import TriggerEvent, dispatch_retrying
from ade_tasks.errors import RuleProblem
from ade_tasks.one_shots import schedule_manual_run
from ade_tasks.rules.loader import parse_rule, parse_yaml
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.schedules import rule_schedules

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1/rules", tags=["rules"])
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "no such rule"}
}


CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": Problem, "description": "the rule comes from a rules file, or is in use"}
}
PROBLEM = "application/problem+json"


# --- wire schemas of rule writes (kept here: ade_api.schemas holds the shared ones) -----------


class RuleWrite(BaseModel):
    """A rule to create or replace: its document as JSON, or the YAML text of a rule file (one
    rule), exactly one of the two."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "document": {
                        "id": "nightly-tests",
                        "triggers": [{"type": "schedule", "cron": "0 3 * * *"}],
                        "execution": {
                            "kind": "built-in",
                            "actions": [{"type": "run-command", "command": "make test"}],
                        },
                    }
                },
                {"yaml": "id: hello\ntriggers: [{type: manual}]\nexecution: ..."},
            ]
        },
    )

    document: dict[str, Any] | None = Field(default=None, description="the rule as JSON")
    yaml: str | None = Field(
        default=None, max_length=1_000_000, description="the rule as YAML (a rule file's text)"
    )
    by: By = None

    @model_validator(mode="after")
    def _one_of(self) -> RuleWrite:
        if (self.document is None) == (self.yaml is None):
            raise ValueError("send exactly one of `document` (JSON) or `yaml` (text)")
        return self


class FieldProblem(BaseModel):
    """One wrong field of a rule document."""

    field: str = Field(description="dotted path in the rule document, e.g. `triggers.0.cron`")
    reason: str


class RuleProblems(Problem):
    """An invalid rule document (problem+json with one entry per wrong field)."""

    errors: list[FieldProblem]


class RuleVersionOut(BaseModel):
    """One version of a rule: its document then, and who made it when and how."""

    model_config = ConfigDict(from_attributes=True)

    rule_id: str
    version: int
    change: str = Field(description="created | updated | deleted")
    source: str = Field(description="file | api")
    source_file: str | None
    content_hash: str
    changed_by: str = Field(description="token name (and `by`), or `rules sync` for files")
    changed_at: datetime
    document: dict[str, Any]


class RuleVersionPage(BaseModel):
    """One page of a rule's version history, newest first."""

    items: list[RuleVersionOut]
    next_cursor: str | None = Field(description="pass as `cursor` to get the next page")


class TriggerSchedule(ScheduleTriggerPreview):
    """The next fire times of one schedule trigger, or why it has none."""

    problem: str | None = Field(
        default=None,
        description="why this trigger cannot fire (then `next` is empty), e.g. a cron that "
        "never fires, stored before validation refused it",
    )


class RuleSchedule(SchedulePreview):
    """The next fire times of every schedule trigger of a rule, and its problems."""

    triggers: list[TriggerSchedule]  # type: ignore[assignment]
    problems: list[str] = Field(
        default_factory=list,
        description="why some or all of its schedules cannot fire (each also named on its "
        "trigger); the beats leave those out and keep firing everything else",
    )


class RuleDeleted(BaseModel):
    """A deleted rule: gone from triggers and schedules; its runs and history stay."""

    rule_id: str
    version: int = Field(description="the `deleted` entry of its version history")
    message: str


INVALID: dict[int | str, dict[str, Any]] = {
    422: {
        "model": RuleProblems,
        "description": "invalid rule document; `errors` names each wrong field",
        "content": {PROBLEM: {}},
    }
}
NEXT_CURSOR = "X-Next-Cursor"


def _invalid(problems: list[RuleProblem]) -> JSONResponse:
    detail = "invalid rule: " + "; ".join(f"{p.field}: {p.reason}" for p in problems)
    body = RuleProblems(
        title="Invalid Rule",
        status=422,
        detail=detail,
        errors=[FieldProblem(field=p.field, reason=p.reason) for p in problems],
    )
    return JSONResponse(body.model_dump(), status_code=422, media_type=PROBLEM)


def _parse(body: RuleWrite, rule_id: str | None = None) -> tuple[Rule, bool] | JSONResponse:
    """The validated rule of a write (and whether its document says `enabled`), or the 422."""
    source = "rule"
    document: Any = body.document
    if body.yaml is not None:
        document = parse_yaml(body.yaml, source)
        if isinstance(document, RuleProblem):
            return _invalid([document])
    if rule_id is not None and isinstance(document, dict):
        document.setdefault("id", rule_id)
        if document["id"] != rule_id:
            return _invalid(
                [
                    RuleProblem(
                        source,
                        "id",
                        f"{document['id']!r} is not the rule being updated ({rule_id!r}); "
                        "to rename a rule, create the new one and delete the old",
                    )
                ]
            )
    parsed = parse_rule(document, source)
    if not isinstance(parsed, Rule):
        return _invalid(parsed)
    return parsed, isinstance(document, dict) and "enabled" in document


# --- routes ---------------------------------------------------------------------------------


@router.get(
    "",
    responses={
        200: {
            "headers": {
                NEXT_CURSOR: {
                    "description": "with `limit`: the `cursor` of the next page (absent on the "
                    "last page)",
                    "schema": {"type": "string"},
                },
                "Link": {
                    "description": 'the next page as `rel="next"`',
                    "schema": {"type": "string"},
                },
            }
        }
    },
)
def list_rules(
    request: Request,
    response: Response,
    session: SessionDep,
    services: ServicesDep,
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
    cursor: str | None = None,
) -> list[RuleOut]:
    """Rules, by id. Without `limit`, every rule; with it, a page of at most `limit` rules after
    `cursor`, and the next page's cursor in the `X-Next-Cursor` header (and a `Link` header).
    Each with its `health`: whether it can fire, per trigger."""
    state = live_state(session, services.settings)
    if limit is None and cursor is None:
        return [rule_out(row, state) for row in rules_db.list_rules(session)]
    rows, next_cursor = rules_db.list_rules_page(session, limit=limit or 100, cursor=cursor)
    if next_cursor is not None:
        response.headers[NEXT_CURSOR] = next_cursor
        next_url = request.url.include_query_params(cursor=next_cursor, limit=limit or 100)
        response.headers["Link"] = f'<{next_url}>; rel="next"'
    return [rule_out(row, state) for row in rows]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={**INVALID, 409: {"model": Problem, "description": "the id is taken"}},
)
def create_rule(
    body: RuleWrite, request: Request, response: Response, services: ServicesDep
) -> RuleOut:
    """Create a rule (source `api`) from its JSON document or YAML text. It is trusted (only an
    admin may create one) but may not call admin-only `ade-action`s: those need a rule from the
    cluster's rules directory."""
    parsed = _parse(body)
    if isinstance(parsed, JSONResponse):
        return parsed  # type: ignore[return-value]
    rule, _ = parsed
    with services.session_factory.begin() as session:
        row = rule_edits_db.create_rule(session, rule, actor(request, body.by))
        out = rule_out(row, live_state(session, services.settings))
    response.headers["Location"] = str(request.url_for("get_rule", rule_id=rule.id))
    return out


@router.post("/trust", responses=NOT_FOUND)
def trust_shared_file(body: TrustRequest, request: Request, services: ServicesDep) -> TrustGranted:
    """Trust a reviewed shared rules file; its rules may run until the file changes again."""
    with services.session_factory.begin() as session:
        released = rule_trust_db.trust_hash(session, body.content_hash, actor(request, body.by))
    return TrustGranted(content_hash=body.content_hash, rules=released)


@router.get("/{rule_id}", responses=NOT_FOUND)
def get_rule(rule_id: str, session: SessionDep, services: ServicesDep) -> RuleOut:
    """One rule with its validated document and its `health`."""
    row = rules_db.get_rule(session, rule_id)
    return rule_out(row, live_state(session, services.settings))


@router.put("/{rule_id}", responses={**NOT_FOUND, **INVALID, **CONFLICT})
def update_rule(rule_id: str, body: RuleWrite, request: Request, services: ServicesDep) -> RuleOut:
    """Replace a rule's document (the `id` may be left out); a changed document is a new version
    in its history, an identical one changes nothing. A document without `enabled` keeps the
    rule enabled or disabled as it is. Rules from files are refused with 409: edit the file and
    run `ade-tasks rules sync`."""
    parsed = _parse(body, rule_id)
    if isinstance(parsed, JSONResponse):
        return parsed  # type: ignore[return-value]
    rule, says_enabled = parsed
    with services.session_factory.begin() as session:
        row, _ = rule_edits_db.update_rule(
            session, rule_id, rule, actor(request, body.by), keep_enabled=not says_enabled
        )
        return rule_out(row, live_state(session, services.settings))


@router.delete("/{rule_id}", responses={**NOT_FOUND, **CONFLICT})
def delete_rule(
    rule_id: str,
    request: Request,
    services: ServicesDep,
    by: Annotated[str, Query(max_length=200)] = "",
) -> RuleDeleted:
    """Delete a rule created through the API. Its runs, schedule occurrences and version history
    stay (the history ends with a `deleted` entry; re-creating the id continues its versions).
    Refused with 409 while a run of it is queued, running or waiting, and for rules from files
    (remove the file and run `ade-tasks rules sync`)."""
    with services.session_factory.begin() as session:
        version = rule_edits_db.delete_rule(session, rule_id, actor(request, by))
    return RuleDeleted(
        rule_id=rule_id,
        version=version,
        message=f"rule {rule_id!r} deleted; its runs and version history are kept",
    )


def _set_enabled(rule_id: str, enabled: bool, services: ServicesDep, force: bool = True) -> RuleOut:
    with services.session_factory.begin() as session:
        row, state = set_enabled(session, services.settings, rule_id, enabled, force=force)
        return rule_out(row, state)


@router.post(
    "/{rule_id}/enable",
    responses={**NOT_FOUND, 409: {"model": Problem, "description": "the rule cannot fire"}},
)
def enable_rule(rule_id: str, services: ServicesDep, force: bool = False) -> RuleOut:
    """Enable a rule: its automatic triggers (schedules, events) run it again. Not a new version;
    for a rule from a file, the file's `enabled` applies again when the file next changes.

    A rule that cannot fire (its `health` is not ready: say, a github.* trigger while
    ADE_GITHUB__WEBHOOK_SECRET is unset and no poller runs) is refused with 409 naming each
    setup error, unless `force=true`."""
    return _set_enabled(rule_id, True, services, force)


@router.post("/{rule_id}/disable", responses=NOT_FOUND)
def disable_rule(rule_id: str, services: ServicesDep) -> RuleOut:
    """Disable a rule: its automatic triggers stop running it (manual runs stay allowed, as for
    `enabled: false` in a file). Not a new version; for a rule from a file, the file's `enabled`
    applies again when the file next changes."""
    return _set_enabled(rule_id, False, services)


@router.get("/{rule_id}/versions", responses=NOT_FOUND)
def rule_versions(
    rule_id: str,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: str | None = None,
) -> RuleVersionPage:
    """A rule's version history, newest first: every document it had, who changed it (token name,
    or `rules sync` for a file) and when; also of a deleted rule."""
    rows, next_cursor = rule_versions_db.list_versions(session, rule_id, limit=limit, cursor=cursor)
    return RuleVersionPage(
        items=[RuleVersionOut.model_validate(row) for row in rows], next_cursor=next_cursor
    )


@router.get("/{rule_id}/schedule", responses=NOT_FOUND)
def schedule_preview(
    rule_id: str, session: SessionDep, count: Annotated[int, Query(ge=1, le=100)] = 10
) -> RuleSchedule:
    """The next fire times of the rule's schedule triggers, in UTC and in each trigger's zone.

    A trigger that cannot fire (a cron that never fires, a time zone unknown here) has its
    `problem` and no times; a stored document that cannot be read is the rule's `problems`.
    One such rule is answered 200 with its problems, never an error."""
    row = rules_db.get_rule(session, rule_id)
    try:
        rule = rules_db.load_rule(row)
    except Exception as exc:
        log.exception("rule %s: the stored document cannot be read", rule_id)
        problem = f"its stored document cannot be read ({type(exc).__name__}: {exc})"
        return RuleSchedule(rule_id=rule_id, enabled=row.enabled, triggers=[], problems=[problem])
    triggers = []
    for found in rule_schedules(rule, utcnow(), count):
        zone = ZoneInfo(found.trigger.timezone) if found.times else None
        triggers.append(
            TriggerSchedule(
                trigger_index=found.index,
                cron=found.trigger.cron or "",
                timezone=found.trigger.timezone,
                next=[FireTime(utc=t, local=t.astimezone(zone)) for t in found.times],
                problem=found.problem,
            )
        )
    problems = [t.problem for t in triggers if t.problem]
    return RuleSchedule(rule_id=rule_id, enabled=row.enabled, triggers=triggers, problems=problems)


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
    trigger = TriggerEvent.manual(body.inputs, key=key, by=body.requested_by, forced_by=forced_by)
    result = await run_in_threadpool(
        partial(
            dispatch_retrying,
            own_key=idempotency_key is None,
            automations_disabled=services.settings.disable_automations,
        ),
        services.session_factory, services.sender, rule_id, trigger,
    )  # fmt: skip
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
    """Store a scheduled manual run (`ade_tasks.one_shots.schedule_manual_run`)."""
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
