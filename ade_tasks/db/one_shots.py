"""Query functions for scheduled (one-shot) runs: store, claim, settle, list, cancel."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.schema import ScheduledRunRow
from ade_tasks.errors import ConflictError, NotFoundError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.triggers import ScheduleTrigger
from ade_tasks.states import OneShotStatus

SCHEDULED = cast(Table, ScheduledRunRow.__table__)
CLAIM_BATCH = 200  # beats ticking together share the due runs (measured at 200, as cron slots were)
RETENTION = timedelta(days=35)


@dataclass(frozen=True)
class Claimed:
    """A scheduled run a beat won, with what firing it needs."""

    id: str
    key: str
    rule_id: str
    trigger_index: int | None
    spec: str | None
    run_at: datetime
    catchup_window: timedelta | None
    inputs: JsonObject
    requested_by: str


@dataclass(frozen=True)
class Settled:
    """What came of one claimed scheduled run."""

    id: str
    status: OneShotStatus
    run_id: str | None
    reason: str | None


@dataclass(frozen=True)
class TriggerOnce:
    """A rule's one-shot trigger as the beats store it."""

    rule_id: str
    trigger_index: int
    trigger: ScheduleTrigger
    stored_at: datetime  # when the rule's current version was stored

    @property
    def run_at(self) -> datetime:
        """The moment it fires: `run_at`, or `delay_seconds` after the version was stored."""
        if self.trigger.run_at is not None:
            return self.trigger.run_at.astimezone(UTC)
        return self.stored_at + timedelta(seconds=self.trigger.delay_seconds or 0)

    @property
    def key(self) -> str:
        """Unique per rule, trigger and resolved time: storing it twice stores it once."""
        return f"trigger:{self.rule_id}:{self.trigger_index}:{self.run_at:%Y-%m-%dT%H:%M:%S.%fZ}"


def _insert(session: Session) -> Any:
    name = session.get_bind().dialect.name
    return (postgresql.insert if name == "postgresql" else sqlite.insert)(SCHEDULED)


def store_trigger_runs(session: Session, triggers: Sequence[TriggerOnce]) -> None:
    """Store each rule trigger's scheduled run once (its key is unique), and cancel the pending
    ones of the same triggers whose time changed (the rule was edited before they fired)."""
    now = utcnow()
    rows: list[dict[str, object]] = [
        {
            "id": str(uuid.uuid4()),
            "key": t.key,
            "rule_id": t.rule_id,
            "trigger_index": t.trigger_index,
            "spec": t.trigger.once,
            "run_at": t.run_at,
            "catchup_seconds": _seconds(t.trigger.catchup_window),
            "inputs": {},
            "requested_by": "",
            "status": OneShotStatus.PENDING.value,
            "created_at": now,
        }
        for t in triggers
    ]
    session.execute(_insert(session).on_conflict_do_nothing(index_elements=["key"]), rows)
    for t in triggers:
        session.execute(
            update(SCHEDULED)
            .where(
                SCHEDULED.c.rule_id == t.rule_id,
                SCHEDULED.c.trigger_index == t.trigger_index,
                SCHEDULED.c.status == OneShotStatus.PENDING.value,
                SCHEDULED.c.key != t.key,
            )
            .values(
                status=OneShotStatus.CANCELLED.value,
                reason=f"replaced: the trigger now fires at {t.run_at.isoformat()}",
            )
        )


def schedule_manual(
    session: Session,
    rule_id: str,
    run_at: datetime,
    *,
    inputs: JsonObject,
    requested_by: str,
    catchup_window: timedelta | None = None,
    key: str | None = None,
) -> tuple[ScheduledRunRow, bool]:
    """Store an operator's scheduled manual run; with a `key` seen before, the earlier one.
    Returns the row and whether this call created it."""
    full_key = f"manual:{key or uuid.uuid4()}"
    found = session.scalars(select(ScheduledRunRow).where(ScheduledRunRow.key == full_key)).first()
    if found is not None:
        return found, False
    row = ScheduledRunRow(
        id=str(uuid.uuid4()),
        key=full_key,
        rule_id=rule_id,
        trigger_index=None,
        spec=None,
        run_at=run_at,
        catchup_seconds=_seconds(catchup_window),
        inputs=inputs,
        requested_by=requested_by,
        status=OneShotStatus.PENDING.value,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row, True


def _seconds(window: timedelta | None) -> int | None:
    return None if window is None else int(window.total_seconds())


_RETURNED = (
    SCHEDULED.c.id,
    SCHEDULED.c.key,
    SCHEDULED.c.rule_id,
    SCHEDULED.c.trigger_index,
    SCHEDULED.c.spec,
    SCHEDULED.c.run_at,
    SCHEDULED.c.catchup_seconds,
    SCHEDULED.c.inputs,
    SCHEDULED.c.requested_by,
)


def _claim(session: Session, beat_id: str, condition: Any, limit: int) -> list[Claimed]:
    """Claim up to `limit` rows matching `condition`, oldest first; only one beat wins a row.
    PostgreSQL skips rows another beat is claiming instead of waiting for them."""
    chosen = select(SCHEDULED.c.id).where(condition).order_by(SCHEDULED.c.run_at).limit(limit)
    postgres = session.get_bind().dialect.name == "postgresql"
    if postgres:
        chosen = chosen.with_for_update(skip_locked=True)
    # Chosen once, in a materialized CTE: as a subquery PostgreSQL may run it again for each
    # row it updates, each time skipping the rows just locked, so one claim took every due
    # row (10,000 one-shots: 83 s to queue, quadratic) instead of `limit` of them.
    ids = chosen.cte("chosen")
    if postgres:
        ids = ids.prefix_with("MATERIALIZED")
    statement = (
        update(SCHEDULED)
        .where(SCHEDULED.c.id.in_(select(ids.c.id)), condition)
        .values(status=OneShotStatus.CLAIMED.value, claimed_by=beat_id, claimed_at=utcnow())
        .returning(*_RETURNED)
    )
    claimed = [
        Claimed(
            row.id,
            row.key,
            row.rule_id,
            row.trigger_index,
            row.spec,
            row.run_at,
            None if row.catchup_seconds is None else timedelta(seconds=row.catchup_seconds),
            dict(row.inputs or {}),
            row.requested_by,
        )
        for row in session.execute(statement)
    ]
    return sorted(claimed, key=lambda c: (c.run_at, c.id))


def claim_due(session: Session, beat_id: str, now: datetime, limit: int) -> list[Claimed]:
    """Claim pending scheduled runs due by `now`."""
    due = and_(SCHEDULED.c.status == OneShotStatus.PENDING.value, SCHEDULED.c.run_at <= now)
    return _claim(session, beat_id, due, limit)


def claim_stale(
    session: Session, beat_id: str, claimed_before: datetime, limit: int = 100
) -> list[Claimed]:
    """Take over claims whose beat recorded no outcome since `claimed_before` (it died)."""
    stale = and_(
        SCHEDULED.c.status == OneShotStatus.CLAIMED.value,
        SCHEDULED.c.claimed_at < claimed_before,
    )
    return _claim(session, beat_id, stale, limit)


def settle(session: Session, outcomes: Sequence[Settled]) -> None:
    """Record what came of claimed scheduled runs."""
    if not outcomes:
        return
    session.execute(
        update(SCHEDULED)
        .where(SCHEDULED.c.id == bindparam("settled_id"))
        .values(
            status=bindparam("new_status"),
            run_id=bindparam("new_run_id"),
            reason=bindparam("new_reason"),
        ),
        [
            {
                "settled_id": o.id,
                "new_status": o.status.value,
                "new_run_id": o.run_id,
                "new_reason": o.reason,
            }
            for o in outcomes
        ],
        execution_options={"synchronize_session": False},
    )


def list_scheduled(
    session: Session,
    *,
    rule_id: str | None = None,
    statuses: Sequence[str] = (),
    limit: int = 100,
) -> Sequence[ScheduledRunRow]:
    """Scheduled runs, soonest first (optionally of one rule, in some statuses)."""
    query = select(ScheduledRunRow)
    if rule_id is not None:
        query = query.where(ScheduledRunRow.rule_id == rule_id)
    if statuses:
        query = query.where(ScheduledRunRow.status.in_(list(statuses)))
    query = query.order_by(ScheduledRunRow.run_at, ScheduledRunRow.id).limit(limit)
    return session.scalars(query).all()


def get_scheduled(session: Session, scheduled_id: str) -> ScheduledRunRow:
    """One scheduled run; NotFoundError if there is none."""
    row = session.get(ScheduledRunRow, scheduled_id)
    if row is None:
        raise NotFoundError(
            f"no scheduled run {scheduled_id!r}; `ade-tasks runs scheduled` lists them"
        )
    return row


def cancel(session: Session, scheduled_id: str, by: str) -> ScheduledRunRow:
    """Cancel a pending scheduled run; ConflictError once a beat has claimed it."""
    changed = session.execute(
        update(SCHEDULED)
        .where(SCHEDULED.c.id == scheduled_id, SCHEDULED.c.status == OneShotStatus.PENDING.value)
        .values(status=OneShotStatus.CANCELLED.value, reason=f"cancelled by {by or 'an operator'}")
    )
    row = get_scheduled(session, scheduled_id)
    session.refresh(row)
    if not getattr(changed, "rowcount", 0):
        run = f" as run {row.run_id}" if row.run_id else ""
        raise ConflictError(
            f"scheduled run {scheduled_id} is {row.status}{run}, so it can no longer be "
            "cancelled; a run that started is cancelled with `ade-tasks runs cancel RUN`"
        )
    return row


def prune(session: Session, now: datetime | None = None) -> int:
    """Delete settled scheduled runs due more than the retention (35 days) ago."""
    cutoff = (now or utcnow()) - RETENTION
    result = session.execute(
        SCHEDULED.delete().where(
            SCHEDULED.c.run_at < cutoff,
            SCHEDULED.c.status.not_in([OneShotStatus.PENDING.value, OneShotStatus.CLAIMED.value]),
        )
    )
    return int(getattr(result, "rowcount", 0) or 0)
