"""Query functions for ingress events, custom hook delivery logs and hook rate windows."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, cast

from sqlalchemy import Table, bindparam, case, delete, func, or_, select, text, update
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.schema import HookDeliveryRow, IngressEventRow
from ade_tasks.json_document import JsonObject
from ade_tasks.states import IngressStatus

EVENTS = cast(Table, IngressEventRow.__table__)
#: Retention, enforced as events are written (every `PRUNE_EVERY` inserts) and hourly by the
#: beats: events older than `MAX_AGE` go, the newest `KEEP_UNDISPATCHED` not yet dispatched are
#: kept, and there are never more than `HARD_CAP` (+ `PRUNE_EVERY`) of any status.
MAX_AGE = timedelta(days=7)
KEEP_UNDISPATCHED = 2_000
HARD_CAP = 10_000
PRUNE_EVERY = 100
#: Claims (`claim_event`): an event claimed this often without its matching ever finishing
#: (the worker died each time) is failed as poison on its next delivery; a claim keeps a second
#: message for the same event off it for `CLAIM_HOLD`, longer than matching may take.
MAX_ATTEMPTS = 3
CLAIM_HOLD = timedelta(seconds=30)
DELIVERY_LOG = 50
DELIVERY_BODY_CAP = 64 * 1024

EVENT_COLUMNS = (
    "source",
    "delivery_id",
    "event_key",
    "trigger_type",
    "summary",
    "body_hash",
    "payload",
    "received_at",
)


def _insert_events(values: str, returning: str) -> str:
    """The one INSERT of ingress events: `values` a VALUES list in `EVENT_COLUMNS` order; a row
    whose delivery id or body hash was seen from its source is skipped."""
    return (
        f"INSERT INTO ingress_events ({', '.join(EVENT_COLUMNS)}, status) "
        f"VALUES {values} ON CONFLICT DO NOTHING RETURNING {returning}"
    )


_INSERT_EVENT = text(
    _insert_events("(" + ", ".join(f":{c}" for c in EVENT_COLUMNS) + ", 'received')", "id")
).bindparams(*(bindparam(c, type_=EVENTS.c[c].type) for c in ("payload", "received_at")))


@cache
def insert_events_sql(rows: int) -> str:
    """The same INSERT of `rows` events at once, for a raw psycopg connection (the webhook
    routes' asyncio pool): positional parameters, row after row in `EVENT_COLUMNS` order
    (`payload` wrapped in `psycopg.types.json.Jsonb`). It returns the id, source, delivery id
    and body hash of each event stored; a row whose delivery id or body hash was seen (in the
    table or earlier in the same INSERT) is skipped."""
    row = "(" + ", ".join(["%s"] * len(EVENT_COLUMNS)) + ", 'received')"
    return _insert_events(", ".join([row] * rows), "id, source, delivery_id, body_hash")


def event_row(
    *,
    source: str,
    delivery_id: str | None,
    event_key: str,
    trigger_type: str | None,
    summary: str,
    body_hash: str | None,
    payload: JsonObject,
) -> JsonObject:
    """The parameters of the event INSERT, cut to the columns' sizes and stamped now."""
    return {
        "source": source,
        "delivery_id": delivery_id,
        "event_key": event_key[:128],
        "trigger_type": trigger_type,
        "summary": summary[:500],
        "body_hash": body_hash,
        "payload": payload,
        "received_at": utcnow(),
    }


def record_event(session: Session, row: JsonObject) -> int | None:
    """Store an `event_row` unless its delivery id or body hash was seen from this source
    (None: a duplicate, nothing stored). The caller prunes when `prune_due(event_id)`."""
    event_id = session.execute(_INSERT_EVENT, row).scalar_one_or_none()
    return None if event_id is None else int(event_id)


def prune_due(event_id: int) -> bool:
    """Does writing this event call for applying the retention bounds (every `PRUNE_EVERY`)?"""
    return event_id % PRUNE_EVERY == 0


def prune(session: Session, now: datetime) -> int:
    """Apply the retention bounds; returns how many events were dropped."""
    dropped = _rowcount(session.execute(delete(EVENTS).where(EVENTS.c.received_at < now - MAX_AGE)))
    waiting = (
        select(EVENTS.c.id)
        .where(EVENTS.c.status != IngressStatus.DISPATCHED)
        .order_by(EVENTS.c.id.desc())
        .offset(KEEP_UNDISPATCHED)
        .limit(1)
    )
    oldest_kept = session.execute(waiting).scalar_one_or_none()
    if oldest_kept is not None:
        dropped += _rowcount(
            session.execute(
                delete(EVENTS).where(
                    EVENTS.c.status != IngressStatus.DISPATCHED, EVENTS.c.id <= oldest_kept
                )
            )
        )
    cap = select(EVENTS.c.id).order_by(EVENTS.c.id.desc()).offset(HARD_CAP).limit(1)
    over = session.execute(cap).scalar_one_or_none()
    if over is not None:
        dropped += _rowcount(session.execute(delete(EVENTS).where(EVENTS.c.id <= over)))
    return dropped


def _rowcount(result: Any) -> int:
    return int(getattr(result, "rowcount", 0) or 0)


def get_event(session: Session, event_id: int) -> IngressEventRow | None:
    """One event by id."""
    return session.get(IngressEventRow, event_id)


@dataclass(frozen=True)
class ClaimedEvent:
    """An event a worker claimed for matching, with what matching needs of it."""

    id: int
    source: str
    delivery_id: str | None
    trigger_type: str | None
    summary: str
    payload: JsonObject
    attempts: int  # this claim included


def claim_event(
    session: Session, event_id: int, now: datetime, hold: timedelta = CLAIM_HOLD
) -> ClaimedEvent | None:
    """Claim a `received` event for matching: one more attempt, stamped `now`.

    None when it was handled already, or when another worker claimed it less than `hold` ago
    (a second message for the same event, say a redelivery racing the sweep's re-send). Commit
    the claim before matching: an attempt whose worker dies must still count."""
    claimed = session.execute(
        update(EVENTS)
        .where(
            EVENTS.c.id == event_id,
            EVENTS.c.status == IngressStatus.RECEIVED,
            or_(EVENTS.c.claimed_at.is_(None), EVENTS.c.claimed_at < now - hold),
        )
        .values(attempts=EVENTS.c.attempts + 1, claimed_at=now)
        .returning(
            EVENTS.c.source,
            EVENTS.c.delivery_id,
            EVENTS.c.trigger_type,
            EVENTS.c.summary,
            EVENTS.c.payload,
            EVENTS.c.attempts,
        )
    ).one_or_none()
    if claimed is None:
        return None
    source, delivery_id, trigger_type, summary, payload, attempts = claimed
    return ClaimedEvent(
        event_id, source, delivery_id, trigger_type, summary, dict(payload), int(attempts)
    )


def release_event(session: Session, event_id: int) -> None:
    """Undo a claim whose matching the database broke off: the attempt does not count toward
    `MAX_ATTEMPTS`, and the next message for the event may claim it at once."""
    session.execute(
        update(EVENTS)
        .where(EVENTS.c.id == event_id, EVENTS.c.status == IngressStatus.RECEIVED)
        .values(
            attempts=case((EVENTS.c.attempts > 0, EVENTS.c.attempts - 1), else_=0),
            claimed_at=None,
        )
    )


def finish_event(
    session: Session,
    event_id: int,
    status: IngressStatus,
    runs: list[str] | None,
    error: str | None,
    *,
    matching: JsonObject | None = None,
) -> None:
    """Record what matching and dispatching made of an event, with its matching verdicts
    (`ade_tasks.triggers.verdicts.MatchReport.to_json`)."""
    session.execute(
        update(IngressEventRow)
        .where(IngressEventRow.id == event_id)
        .values(status=status, runs=runs, error=error, matching=matching, processed_at=utcnow())
    )


def hold_event(session: Session, event_id: int, reason: str, now: datetime) -> None:
    """Say on a `received` event that the kill switch holds it, and since when (the first
    hold): it stays received and unclaimed, so the recovery sweep hands it back later."""
    session.execute(
        update(EVENTS)
        .where(
            EVENTS.c.id == event_id,
            EVENTS.c.status == IngressStatus.RECEIVED,
            EVENTS.c.matching.is_(None),
        )
        .values(matching={"held": reason, "held_at": now.isoformat()})
    )


def list_events(
    session: Session,
    *,
    source: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    before: int | None = None,
    limit: int = 100,
) -> Sequence[IngressEventRow]:
    """Events, newest first; `since`: received at or after; `before` pages by id."""
    stmt = select(IngressEventRow).order_by(IngressEventRow.id.desc()).limit(limit)
    if source:
        stmt = stmt.where(IngressEventRow.source == source)
    if status:
        stmt = stmt.where(IngressEventRow.status == status)
    if since is not None:
        stmt = stmt.where(IngressEventRow.received_at >= since)
    if before is not None:
        stmt = stmt.where(IngressEventRow.id < before)
    return session.scalars(stmt).all()


def unprocessed_events(session: Session, older_than: timedelta, limit: int = 200) -> list[int]:
    """Events still `received` after `older_than` (their message was lost): to re-send."""
    cutoff = utcnow() - older_than
    return list(
        session.scalars(
            select(IngressEventRow.id)
            .where(
                IngressEventRow.status == IngressStatus.RECEIVED,
                IngressEventRow.received_at < cutoff,
            )
            .order_by(IngressEventRow.id)
            .limit(limit)
        )
    )


# --- custom hooks ---------------------------------------------------------------------------
#
# A delivery either passed authentication (its token, timestamp and signature) or was refused
# before it did (a wrong token or signature, a stale timestamp, a body too large or too slow to
# read). The two kinds never share a budget: each has its own rate window per minute and its
# own ring of `DELIVERY_LOG` log entries, so deliveries from someone without the secret can
# neither get an authentic delivery refused (429) nor push it out of the log.

_WINDOW = bindparam("window", type_=HookDeliveryRow.received_at.type)
_RATE = text(
    'INSERT INTO hook_rates (hook_id, "window", count) VALUES (:hook_id, :window, 1) '
    'ON CONFLICT (hook_id, "window") DO UPDATE SET count = hook_rates.count + 1 RETURNING count'
).bindparams(_WINDOW)
_FORGET_WINDOWS = text(
    'DELETE FROM hook_rates WHERE hook_id = :hook_id AND "window" < :window'
).bindparams(_WINDOW)
#: The rate windows of rejected deliveries are keyed `<hook>/rejected`: a hook id is one URL
#: path segment, so it never contains `/` and never collides with such a key.
REJECTED_SUFFIX = "/rejected"
_KEY_LENGTH = 64  # hook_rates.hook_id


def rate_key(hook_id: str, *, rejected: bool) -> str:
    """The `hook_rates` key of a hook's authentic or rejected deliveries."""
    if not rejected:
        return hook_id
    key = hook_id + REJECTED_SUFFIX
    if len(key) > _KEY_LENGTH:  # still distinct from every hook id, and it fits the column
        key = hashlib.sha256(hook_id.encode()).hexdigest()[:40] + REJECTED_SUFFIX
    return key


def count_delivery(session: Session, hook_id: str, now: datetime, *, rejected: bool = False) -> int:
    """Count a delivery in the hook's current minute, on the authentic or the rejected window;
    returns that window's count so far."""
    window = now.replace(second=0, microsecond=0)
    params = {"hook_id": rate_key(hook_id, rejected=rejected), "window": window}
    count = int(session.execute(_RATE, params).scalar_one())
    if count == 1:  # a new minute: forget the older windows of this kind
        session.execute(_FORGET_WINDOWS, params)
    return count


def log_delivery(
    session: Session,
    *,
    hook_id: str,
    status_code: int,
    outcome: str,
    delivery_id: str | None,
    event_id: int | None,
    headers: dict[str, str],
    body: bytes,
    rejected: bool = False,
) -> None:
    """Append to the hook's log of authentic or of `rejected` deliveries, keeping the newest
    `DELIVERY_LOG` entries of that ring."""
    text_body = body[:DELIVERY_BODY_CAP].decode("utf-8", errors="replace")
    if len(body) > DELIVERY_BODY_CAP:
        text_body += f"\n[... {len(body) - DELIVERY_BODY_CAP} more bytes not kept]"
    session.add(
        HookDeliveryRow(
            hook_id=hook_id,
            received_at=utcnow(),
            status_code=status_code,
            outcome=outcome,
            delivery_id=delivery_id,
            event_id=event_id,
            headers=headers,
            body=text_body,
            rejected=rejected,
        )
    )
    session.flush()
    ring = (HookDeliveryRow.hook_id == hook_id, HookDeliveryRow.rejected == rejected)
    keep = (
        select(HookDeliveryRow.id)
        .where(*ring)
        .order_by(HookDeliveryRow.id.desc())
        .offset(DELIVERY_LOG)
        .limit(1)
    )
    oldest = session.execute(keep).scalar_one_or_none()
    if oldest is not None:
        session.execute(delete(HookDeliveryRow).where(*ring, HookDeliveryRow.id <= oldest))


def log_rejected(
    session: Session,
    *,
    hook_id: str,
    now: datetime,
    limit: int,
    status_code: int,
    outcome: str,
    delivery_id: str | None,
    headers: dict[str, str],
    body: bytes,
) -> bool:
    """Count a delivery that failed authentication on the hook's rejected window and, while
    that window is within `limit`, log it on the rejected ring. False when over the limit
    (nothing logged: a flood of forgeries costs one counter update each)."""
    if count_delivery(session, hook_id, now, rejected=True) > limit:
        return False
    log_delivery(
        session,
        hook_id=hook_id,
        status_code=status_code,
        outcome=outcome,
        delivery_id=delivery_id,
        event_id=None,
        headers=headers,
        body=body,
        rejected=True,
    )
    return True


def list_deliveries(
    session: Session, hook_id: str, *, rejected: bool | None = None
) -> Sequence[HookDeliveryRow]:
    """A hook's delivery log, newest first: one ring (`rejected` true or false), or both."""
    rings = [False, True] if rejected is None else [rejected]
    rows: list[HookDeliveryRow] = []
    for ring in rings:
        rows += session.scalars(
            select(HookDeliveryRow)
            .where(HookDeliveryRow.hook_id == hook_id, HookDeliveryRow.rejected == ring)
            .order_by(HookDeliveryRow.id.desc())
            .limit(DELIVERY_LOG)
        ).all()
    return sorted(rows, key=lambda row: row.id, reverse=True)


def events_count(session: Session) -> int:
    """How many events are stored."""
    return int(session.scalar(select(func.count()).select_from(IngressEventRow)) or 0)
