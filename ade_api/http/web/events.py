"""The web page's ingress events: what webhooks and local events delivered and, for each, what
matching made of every rule with a trigger of its type (why did nothing run?).

`/ui/events` lists the newest events (filtered by source and status) with their verdict counts;
`/ui/events/{id}` shows one event's verdicts, rule by rule: the run it started, or the filter
that refused it and the value that filter saw, or that the rule is paused, disabled, untrusted
or held by the kill switch. The same query functions as `GET /api/v1/ingress/events` read them;
the page never shows an event's raw payload (the API does, to viewers).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from ade_api.http.web.pages import error_page, read, render
from ade_tasks.db import ingress as ingress_db
from ade_tasks.errors import AdeError, InvalidInputError, NotFoundError
from ade_tasks.json_document import JsonObject
from ade_tasks.states import IngressStatus
from ade_tasks.triggers import verdicts

router = APIRouter(prefix="/ui", include_in_schema=False)
PAGE_SIZE = 100


@router.get("/events")
def events_page(request: Request, source: str = "", status: str = "") -> HTMLResponse:
    """The newest ingress events with what matching made of each."""
    known = [s.value for s in IngressStatus]
    try:
        if status and status not in known:
            raise InvalidInputError(f"status {status!r} is unknown; use one of {', '.join(known)}")
        rows = read(
            request,
            lambda session: list(
                ingress_db.list_events(
                    session, source=source or None, status=status or None, limit=PAGE_SIZE
                )
            ),
        )
    except AdeError as exc:
        return error_page(request, exc)
    return render(
        request, "events.html", "Events",
        rows=rows, summaries={row.id: verdicts.summary(row.matching) for row in rows},
        statuses=known, status=status, source=source, limit=PAGE_SIZE,
    )  # fmt: skip


@router.get("/events/{event_id}")
def event_page(request: Request, event_id: int) -> HTMLResponse:
    """One ingress event and each candidate rule's verdict."""
    row = read(request, lambda session: ingress_db.get_event(session, event_id))
    if row is None:
        return error_page(
            request,
            NotFoundError(f"no ingress event {event_id}; events are kept 7 days (at most 10,000)"),
        )
    matching = row.matching or {}
    return render(
        request, "event.html", f"Event {event_id}",
        event=row, recorded=row.matching is not None, held=matching.get("held"),
        held_at=matching.get("held_at"), note=matching.get("note"),
        entries=[_entry(entry) for entry in matching.get("rules") or []],
        left_out=matching.get("left_out") or 0, summary=verdicts.summary(row.matching),
    )  # fmt: skip


def _entry(entry: JsonObject) -> JsonObject:
    """A stored verdict with every field the template shows (absent ones are not stored)."""
    return {name: entry.get(name) for name in ("rule", "verdict", "trigger", "filter", "reason",
                                               "run", "event")}  # fmt: skip
