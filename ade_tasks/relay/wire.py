"""The relay's wire format: one page of `GET /relay/v1/events`, written by the relay and read
by the drain.

```json
{"events": [{"cursor": 41, "source": "github", "delivery_id": "72d3162e-...",
             "event": "pull_request", "received_at": "2026-12-01T10:00:00+00:00",
             "body": "<the raw body, base64>"}],
 "newest": 57}
```

Bodies travel as base64 of the exact bytes the relay verified, so the cluster hashes the same
bytes a direct delivery would have carried (its duplicate check by body hash still holds).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from ade_tasks.errors import AdeError
from ade_tasks.json_document import JsonObject
from ade_tasks.relay.store import StoredEvent


class RelayProtocolError(AdeError):
    """The relay's answer is not a page of events: check that ADE_RELAY__URL points at an
    `ade-tasks relay serve`."""


@dataclass(frozen=True)
class RelayedEvent:
    """One event of a page as the drain reads it; `problem` says why its body is unusable."""

    cursor: int
    source: str
    delivery_id: str | None
    event: str | None
    body: bytes
    problem: str | None = None


@dataclass(frozen=True)
class RelayPage:
    """A page of events, oldest first, and the newest cursor the relay holds."""

    events: tuple[RelayedEvent, ...]
    newest: int


def page_document(events: list[StoredEvent], newest: int) -> JsonObject:
    """The JSON document of a page (the relay's side)."""
    return {
        "events": [
            {
                "cursor": e.cursor,
                "source": e.source,
                "delivery_id": e.delivery_id,
                "event": e.event,
                "received_at": e.received_at.isoformat(),
                "body": base64.b64encode(e.body).decode(),
            }
            for e in events
        ],
        "newest": newest,
    }


def parse_page(document: object, where: str) -> RelayPage:
    """Read a page (the drain's side). RelayProtocolError when the page itself is malformed;
    an event whose body alone is unreadable comes back with its `problem` (a poison event)."""
    if not isinstance(document, dict) or not isinstance(document.get("events"), list):
        raise RelayProtocolError(
            f"{where} answered something other than a page of events (no `events` list); "
            "check that ADE_RELAY__URL points at an `ade-tasks relay serve`"
        )
    events = []
    for index, item in enumerate(document["events"]):
        cursor = item.get("cursor") if isinstance(item, dict) else None
        source = item.get("source") if isinstance(item, dict) else None
        if not isinstance(cursor, int) or isinstance(cursor, bool) or not isinstance(source, str):
            raise RelayProtocolError(
                f"{where}: events[{index}] has no integer `cursor` and string `source`; "
                "the drain cannot tell how far it read, so it stopped"
            )
        delivery, event = item.get("delivery_id"), item.get("event")
        body, problem = _body(item.get("body"))
        events.append(
            RelayedEvent(
                cursor,
                source,
                delivery if isinstance(delivery, str) and delivery else None,
                event if isinstance(event, str) and event else None,
                body,
                problem,
            )
        )
    newest = document.get("newest")
    last = events[-1].cursor if events else 0
    return RelayPage(tuple(events), newest if isinstance(newest, int) else last)


def _body(value: object) -> tuple[bytes, str | None]:
    if not isinstance(value, str):
        return b"", "the relayed event has no `body` string"
    try:
        return base64.b64decode(value, validate=True), None
    except (binascii.Error, ValueError):
        return b"", "the relayed event's `body` is not base64"
