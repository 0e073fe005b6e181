"""Ingress events: what webhooks and local events delivered, and what became of each."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from ade_api.http.deps import ServicesDep, SessionDep
from ade_api.http.schemas.ingress import (
    IngressEventOut,
    IngressPage,
    LocalEvent,
    LocalEventAccepted,
)
from ade_api.http.schemas.params import EVENT_SOURCE, MAX_ID, Instant, RowId
from ade_api.http.schemas.problem import Problem
from ade_tasks.db import ingress as ingress_db
from ade_tasks.errors import InvalidInputError, NotFoundError
from ade_tasks.ingress import intake
from ade_tasks.ingress.event import EVENT_SOURCES, EventSource, NormalizedEvent
from ade_tasks.rules.triggers import canonical_trigger_type
from ade_tasks.states import IngressStatus

router = APIRouter(prefix="/api/v1/ingress", tags=["ingress"])


@router.get("/events", responses={422: {"model": Problem}})
def list_events(
    session: SessionDep,
    source: Annotated[
        str | None,
        Query(
            json_schema_extra={"pattern": EVENT_SOURCE},
            description="github, git, file, poll, lane or webhook:<hook>",
        ),
    ] = None,
    status: IngressStatus | None = None,
    since: Annotated[
        Instant | None, Query(description="received at or after; ISO 8601 with a time zone")
    ] = None,
    before: Annotated[
        int | None, Query(ge=1, le=MAX_ID, description="events older than this id")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> IngressPage:
    """Events, newest first (the table keeps 7 days, at most 10,000), each with its matching
    verdicts."""
    if source is not None and source not in EVENT_SOURCES and not source.startswith("webhook:"):
        raise InvalidInputError(
            f"source {source!r} is no event source; use one of "
            f"{', '.join(sorted(EVENT_SOURCES))} or webhook:<hook>"
        )
    if since is not None and since.tzinfo is None:
        raise InvalidInputError(
            f"since={since.isoformat()} has no time zone; add one, e.g. Z or +00:00"
        )
    rows = ingress_db.list_events(
        session, source=source, status=status.value if status else None, since=since,
        before=before, limit=limit,
    )  # fmt: skip
    items = [IngressEventOut.model_validate(row) for row in rows]
    return IngressPage(items=items, next_before=items[-1].id if len(items) == limit else None)


@router.get("/events/{event_id}", responses={404: {"model": Problem}})
def get_event(session: SessionDep, event_id: RowId) -> IngressEventOut:
    """One event with its matching verdicts: why each rule with a trigger of its type ran or
    did not."""
    row = ingress_db.get_event(session, event_id)
    if row is None:
        raise NotFoundError(
            f"no ingress event {event_id}; events are kept 7 days (at most 10,000): list them "
            "with GET /api/v1/ingress/events or `ade-tasks events list`"
        )
    return IngressEventOut.model_validate(row)


LOCAL_TYPES = ("git.commit", "git.push", "file.changed")


@router.post("/events", status_code=202, responses={422: {"model": Problem}})
async def emit_event(request: LocalEvent, services: ServicesDep) -> LocalEventAccepted:
    """A local event (`ade-tasks emit`, the git hooks it installs, `ade-tasks watch`): stored
    like a webhook delivery and matched to rules by the ingress workers. A repeated
    `delivery_id` stores nothing."""
    kind = canonical_trigger_type(request.type)
    if kind not in LOCAL_TYPES:
        raise InvalidInputError(
            f"event type {request.type!r} cannot be emitted locally; use one of "
            f"{', '.join(LOCAL_TYPES)} (GitHub events arrive through /api/v1/webhooks/github)"
        )
    source: EventSource = "file" if kind == "file.changed" else "git"
    delivery = request.delivery_id or f"{source}-{uuid.uuid4()}"
    event = NormalizedEvent(
        source=source,
        delivery_id=delivery,
        event_key=kind,
        trigger_type=kind,
        repo=request.repo,
        branch=request.branch,
        title=request.title,
        body=request.body,
        author=request.author,
        head_sha=request.head_sha,
        paths=tuple(sorted(set(request.paths))),
        summary=request.summary or f"{kind} in {request.repo or 'the project'}",
    )
    event_id = await services.intake.store(
        intake.event_row(
            source=source,
            delivery_id=delivery,
            event=event,
            event_key=kind,
            payload={**event.to_payload(), "fields": request.fields},
            digest=None,
        )
    )
    return LocalEventAccepted(event_id=event_id, duplicate=event_id is None, delivery_id=delivery)
