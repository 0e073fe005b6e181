"""Query functions for the notification outbox (`notifications`): add an event's notifications
once per route, claim the due ones under a lease, settle each delivery, prune the settled."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from ade_tasks.db.notification_tables import NotificationRow

PENDING, SENT, FAILED = "pending", "sent", "failed"
#: Settled notifications are kept this long (longer than any sweep looks back, so an event is
#: never notified again because its row was pruned).
KEEP = timedelta(days=7)


@dataclass(frozen=True)
class Notice:
    """One event to notify of: `key` (`<event>:<subject>`) makes it once per route."""

    key: str
    event: str
    title: str
    body: str
    rule_id: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class Claimed:
    """A notification claimed for delivery (read out of its session)."""

    id: int
    key: str
    route: str
    event: str
    title: str
    body: str
    attempts: int


def add(session: Session, notice: Notice, routes: Sequence[str], now: datetime) -> int:
    """Queue `notice` for each of `routes`, skipping routes that already have it: how many
    were queued."""
    if not routes:
        return 0
    rows: list[dict[str, object]] = [
        {
            "key": notice.key,
            "route": route,
            "event": notice.event,
            "rule_id": notice.rule_id,
            "run_id": notice.run_id,
            "title": notice.title[:255],
            "body": notice.body,
            "status": PENDING,
            "attempts": 0,
            "due_at": now,
            "created_at": now,
        }
        for route in routes
    ]
    dialect = session.get_bind().dialect.name
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(NotificationRow)
    result = session.execute(
        insert.on_conflict_do_nothing(index_elements=["key", "route"]).returning(
            NotificationRow.id
        ),
        rows,
    )
    return len(result.all())


def known_keys(session: Session, keys: Collection[str]) -> set[str]:
    """Which of `keys` have notifications already (to skip building them again)."""
    if not keys:
        return set()
    query = select(NotificationRow.key).where(NotificationRow.key.in_(sorted(keys)))
    return set(session.scalars(query))


def claim_due(
    session: Session,
    now: datetime,
    owner: str,
    lease: timedelta,
    *,
    limit: int,
    skip_routes: Collection[str] = (),
) -> list[Claimed]:
    """Claim up to `limit` pending notifications due at `now` whose lease is free, none of
    `skip_routes` (a route still busy in this process), oldest first."""
    query = (
        select(NotificationRow)
        .where(
            NotificationRow.status == PENDING,
            NotificationRow.due_at <= now,
            or_(NotificationRow.claimed_until.is_(None), NotificationRow.claimed_until < now),
        )
        .order_by(NotificationRow.due_at, NotificationRow.id)
        .limit(limit)
    )
    if skip_routes:
        query = query.where(NotificationRow.route.not_in(sorted(skip_routes)))
    claimed = []
    for row in session.scalars(query).all():
        won = session.execute(
            update(NotificationRow)
            .where(
                NotificationRow.id == row.id,
                or_(NotificationRow.claimed_until.is_(None), NotificationRow.claimed_until < now),
            )
            .values(claimed_by=owner, claimed_until=now + lease)
            .execution_options(synchronize_session=False)
        )
        if getattr(won, "rowcount", 0) == 1:
            claimed.append(
                Claimed(row.id, row.key, row.route, row.event, row.title, row.body, row.attempts)
            )
    return claimed


def mark_sent(session: Session, notification_id: int, now: datetime) -> None:
    """Record a delivered notification."""
    session.execute(
        update(NotificationRow)
        .where(NotificationRow.id == notification_id)
        .values(
            status=SENT, attempts=NotificationRow.attempts + 1, sent_at=now, claimed_until=None
        )
    )


def mark_failed(
    session: Session, notification_id: int, error: str, retry_at: datetime | None
) -> None:
    """Record a failed attempt: due again at `retry_at`, or failed for good when None."""
    values: dict[str, object] = {
        "attempts": NotificationRow.attempts + 1,
        "error": error,
        "claimed_until": None,
    }
    if retry_at is None:
        values["status"] = FAILED
    else:
        values["due_at"] = retry_at
    session.execute(
        update(NotificationRow).where(NotificationRow.id == notification_id).values(**values)
    )


def list_notifications(session: Session, key_prefix: str = "") -> Sequence[NotificationRow]:
    """The notifications whose key starts with `key_prefix`, oldest first."""
    query = select(NotificationRow).order_by(NotificationRow.id)
    if key_prefix:
        query = query.where(NotificationRow.key.startswith(key_prefix, autoescape=True))
    return session.scalars(query).all()


def prune(session: Session, now: datetime) -> int:
    """Drop settled notifications older than `KEEP`: how many."""
    result = session.execute(
        delete(NotificationRow).where(
            NotificationRow.status != PENDING, NotificationRow.created_at < now - KEEP
        )
    )
    return int(getattr(result, "rowcount", 0) or 0)
