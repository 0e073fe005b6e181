"""The relay's own database: the verified deliveries it holds, each under a monotonic cursor.

This is not the cluster's database: `ade-tasks relay serve` runs outside the firewall with a
database of its own (`ADE_RELAY__DATABASE_URL`, default SQLite at `<ADE_DATA_DIR>/relay.db`),
whose one table is created on start (`create_schema`; no migration chain: the table is the
whole schema and a relay holds nothing that outlives `ADE_RELAY__RETENTION_DAYS`).

The cursor is the row's id. It only grows, pruning included: SQLite's AUTOINCREMENT never
reuses an id, PostgreSQL's sequence never goes back, so a drain that stored cursor N never
sees an event at or before N again. Ids must also become visible in order, or a drain could
read id 6, move its cursor there, and never see id 5 committed a moment later: SQLite has one
writer at a time anyway, and on PostgreSQL each insert takes a transaction-level advisory lock
(`INSERT_LOCK`) first, so deliveries commit one after the other in id order. A relay stores
one row per delivery; that serialization costs it nothing it would notice.

A delivery is kept with its sender's delivery id, so the cluster deduplicates it against the
same delivery sent to the cluster directly; a delivery id seen before from the same source
(GitHub's "Redeliver") is stored once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import (
    Column,
    Engine,
    LargeBinary,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    delete,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ade_tasks.db.schema import NAMING_CONVENTION, AutoId, UTCDateTime

#: At most this many events in one page of `GET /relay/v1/events`.
PAGE_LIMIT = 100
#: ... and at most about this many body bytes (always at least one event), so a page of large
#: deliveries (GitHub's may be 25 MB each) stays a size a drain can hold.
PAGE_BYTES = 8 * 1024 * 1024
#: The PostgreSQL advisory lock that orders the relay's inserts (see the module docstring).
INSERT_LOCK = 0x5245_4C41  # "RELA"
#: Every this many stored events, events older than the retention are dropped.
PRUNE_EVERY = 100

metadata = MetaData(naming_convention=NAMING_CONVENTION)
relay_events = Table(
    "relay_events",
    metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("source", String(80), nullable=False),  # github | webhook:<hook>
    Column("delivery_id", String(255)),
    Column("event", String(64)),  # X-GitHub-Event; None for a custom hook
    Column("body", LargeBinary, nullable=False),  # the raw body, as verified
    Column("received_at", UTCDateTime, nullable=False),
    # Deliveries without an id (NULL) never collide: SQL's NULLs are distinct.
    UniqueConstraint("source", "delivery_id"),
    sqlite_autoincrement=True,  # ids are never reused, even after pruning
)


@dataclass(frozen=True)
class StoredEvent:
    """A verified delivery as the relay holds it."""

    cursor: int
    source: str
    delivery_id: str | None
    event: str | None
    body: bytes
    received_at: datetime


def create_schema(engine: Engine) -> None:
    """Create the relay's table if it is missing (safe to repeat)."""
    metadata.create_all(engine)


def store(
    session: Session,
    *,
    source: str,
    delivery_id: str | None,
    event: str | None,
    body: bytes,
    now: datetime,
) -> int | None:
    """Keep a verified delivery; its cursor, or None when this source's delivery id was
    stored before (nothing stored)."""
    statement = (
        insert(relay_events)
        .values(source=source, delivery_id=delivery_id, event=event, body=body, received_at=now)
        .returning(relay_events.c.id)
    )
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": INSERT_LOCK})
    try:
        with session.begin_nested():
            cursor = session.execute(statement).scalar_one()
    except IntegrityError:
        return None
    return int(cursor)


def events_after(
    session: Session, after: int, limit: int = PAGE_LIMIT, max_bytes: int = PAGE_BYTES
) -> list[StoredEvent]:
    """The events after cursor `after`, oldest first: at most `limit` of them and, past the
    first, no more than `max_bytes` of bodies."""
    rows = session.execute(
        select(relay_events)
        .where(relay_events.c.id > after)
        .order_by(relay_events.c.id)
        .limit(min(limit, PAGE_LIMIT))
    )
    page: list[StoredEvent] = []
    size = 0
    for row in rows:
        size += len(row.body)
        if page and size > max_bytes:
            break
        page.append(
            StoredEvent(
                row.id, row.source, row.delivery_id, row.event, bytes(row.body), row.received_at
            )
        )
    return page


def newest_cursor(session: Session) -> int:
    """The cursor of the newest event held (0 when none is)."""
    return int(session.execute(select(func.max(relay_events.c.id))).scalar_one_or_none() or 0)


def prune(session: Session, now: datetime, retention: timedelta) -> int:
    """Drop the events received more than `retention` before `now`; how many were dropped."""
    result = session.execute(
        delete(relay_events).where(relay_events.c.received_at < now - retention)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def prune_due(cursor: int) -> bool:
    """Does storing this event call for pruning (every `PRUNE_EVERY`th one)?"""
    return cursor % PRUNE_EVERY == 0
