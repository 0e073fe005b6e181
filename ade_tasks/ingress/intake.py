"""The request side of ingress: what a webhook endpoint does between verifying a delivery and
answering it. One durable write (the event, or the refusal in a hook's delivery log) and a
message to the ingress workers; matching and dispatching happen there (`triggers.ingress_events`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from ade_tasks.clock import utcnow
from ade_tasks.db import ingress as ingress_db
from ade_tasks.db.engine import SessionFactory, autocommit
from ade_tasks.errors import BrokerUnavailableError
from ade_tasks.ingress.event import NormalizedEvent
from ade_tasks.json_document import JsonObject
from ade_tasks.limits import loads_json
from ade_tasks.runs.senders import IngressSender
from ade_tasks.states import IngressStatus

log = logging.getLogger(__name__)

GITHUB = "github"
HOOK_PREFIX = "webhook:"  # a custom hook's deliveries come from source webhook:<hook>


@dataclass(frozen=True)
class Intake:
    """What became of a delivery: the stored event's id, or None for a duplicate."""

    event_id: int | None
    sent: bool = False  # its message reached the broker (False: the recovery sweep sends it)

    @property
    def duplicate(self) -> bool:
        return self.event_id is None


def body_hash(body: bytes) -> str:
    """The sha256 of a raw body (a replayed body is the same delivery, whatever its id)."""
    return hashlib.sha256(body).hexdigest()


def event_row(
    *,
    source: str,
    delivery_id: str | None,
    event: NormalizedEvent | None,
    event_key: str,
    payload: JsonObject,
    digest: str | None,
    trigger_type: str | None = None,
) -> JsonObject:
    """The `ingress_events` row a delivery becomes: a normalized event's key, trigger type and
    summary, or (a custom hook's body) the caller's key and trigger type."""
    return ingress_db.event_row(
        source=source,
        delivery_id=delivery_id,
        event_key=event.event_key if event else event_key,
        trigger_type=event.trigger_type if event else trigger_type,
        summary=event.summary if event else event_key,
        body_hash=digest,
        payload=payload,
    )


def github_row(event: NormalizedEvent, delivery_id: str, body: bytes) -> JsonObject:
    """The `ingress_events` row of a verified GitHub delivery (direct or relayed alike, so the
    two deduplicate against each other by delivery id and body hash)."""
    return event_row(
        source=GITHUB,
        delivery_id=delivery_id,
        event=event,
        event_key=event.event_key,
        payload=event.to_payload(),
        digest=body_hash(body),
    )


def hook_row(hook_id: str, delivery_id: str | None, document: Any) -> JsonObject:
    """The `ingress_events` row of an authentic custom-hook delivery whose filters passed."""
    return event_row(
        source=f"{HOOK_PREFIX}{hook_id}",
        delivery_id=delivery_id,
        event=None,
        event_key=f"webhook.{hook_id}",
        payload={"hook": hook_id, "delivery_id": delivery_id, "body": document},
        digest=None,
        trigger_type="webhook",
    )


def store_event(
    session_factory: SessionFactory, sender: IngressSender, row: JsonObject
) -> Intake:
    """Store an `event_row` (unless its delivery id or body hash was seen) and hand it to the
    ingress workers (`hand_over`). A broker that is down leaves it `received` for the recovery
    sweep. For the relay's deliveries and the tests; the API's routes hand theirs over from a
    thread after answering (`ade_api.http.delivery_intake.EventIntake`)."""
    event_id = record(session_factory, row)
    if event_id is None:
        return Intake(None)
    return Intake(event_id, hand_over(session_factory, sender, [event_id]))


def record(session_factory: SessionFactory, row: JsonObject) -> int | None:
    """Store one `event_row` in a transaction of its own: its event id, or None when its
    delivery id or body hash was seen (a duplicate: nothing stored). The API on PostgreSQL
    stores the same row with the same INSERT, shared by concurrent requests
    (`ade_tasks.db.ingress.insert_events_sql`); the poller in the transaction of its cursor."""
    with autocommit(session_factory).begin() as session:
        return ingress_db.record_event(session, row)


def hand_over(session_factory: SessionFactory, sender: IngressSender, event_ids: list[int]) -> bool:
    """Send stored events to the ingress workers in one message, then apply the table's
    retention bounds if one of them calls for it (`prune_due`). Every stored event goes this
    way, whoever stored it. False when the broker is down: the events stay `received` and the
    recovery sweep sends them."""
    if not event_ids:
        return True
    sent = True
    try:
        sender.send_ingress(*event_ids)
    except BrokerUnavailableError as exc:
        log.warning(
            "ingress events %s are stored but their message was not sent (%s); the recovery "
            "sweep sends them",
            event_ids,
            exc,
        )
        sent = False
    if any(ingress_db.prune_due(event_id) for event_id in event_ids):
        prune_events(session_factory)
    return sent


def prune_events(session_factory: SessionFactory) -> int:
    """Apply the retention bounds of `ingress_events` now; how many events were dropped."""
    with session_factory.begin() as session:
        return ingress_db.prune(session, utcnow())


def store_malformed(
    session_factory: SessionFactory, *, source: str, delivery_id: str | None, error: str
) -> None:
    """Keep a delivery whose body could not be read as a failed event, dispatching nothing."""
    with session_factory.begin() as session:
        row = ingress_db.event_row(
            source=source,
            delivery_id=delivery_id,
            event_key="malformed",
            trigger_type=None,
            summary=error,
            body_hash=None,
            payload={},
        )
        event_id = ingress_db.record_event(session, row)
        if event_id is not None:
            ingress_db.finish_event(session, event_id, IngressStatus.FAILED, None, error)


def parse_json(body: bytes) -> Any:
    """The JSON document of a body; ValueError saying where it broke."""
    try:
        return loads_json(body, what="the body")  # nested too deeply: a ValueError too
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the body is not valid JSON ({exc})") from None
