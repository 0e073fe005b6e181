"""Query functions for runs, their steps and their events.

Every state change is a single conditional statement so that two workers, or a worker and the
recovery sweep, can never both win the same transition.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, and_, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from ade_tasks.db.schema import (
    RuleRow,
    RunEventRow,
    RunRow,
    RunStatus,
    RunStepRow,
    StepStatus,
    utcnow,
)
from ade_tasks.errors import InvalidInputError, NotFoundError

# The hot path uses Core statements on the tables: the ORM unit of work costs more client CPU.
RUNS = cast(Table, RunRow.__table__)
STEPS = cast(Table, RunStepRow.__table__)
EVENTS = cast(Table, RunEventRow.__table__)
RULES = cast(Table, RuleRow.__table__)

MAX_PAGE = 500
MAX_ERROR = 4000
DEFAULT_PAGE = 100


def get_run(session: Session, run_id: str) -> RunRow:
    """The run row, or NotFoundError naming the id."""
    row = session.get(RunRow, run_id)
    if row is None:
        raise NotFoundError(f"run {run_id!r} does not exist; list runs with `ade-tasks runs list`")
    return row


def get_run_by_key(session: Session, idempotency_key: str) -> RunRow | None:
    """The run created for this idempotency key, if any."""
    return session.scalars(select(RunRow).where(RunRow.idempotency_key == idempotency_key)).first()


def insert_run_once(session: Session, values: dict[str, Any]) -> bool:
    """INSERT the run unless its idempotency key exists; True when this call inserted it.

    `ON CONFLICT DO NOTHING` keeps two racing dispatches of the same key from failing either one.
    """
    stmt = (
        _insert(session, RUNS)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
    )
    return session.execute(stmt.returning(RUNS.c.id)).scalar_one_or_none() is not None


def _insert(session: Session, table: Table) -> Any:
    """INSERT for the session's dialect, so `on_conflict_*` is available (PostgreSQL, SQLite)."""
    dialect = session.get_bind().dialect.name
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


@dataclass(frozen=True)
class ClaimedRun:
    """What a worker needs of the run it just claimed, with its rule's current document."""

    id: str
    rule_id: str
    rule_version: int
    trigger: dict[str, Any]
    attempt: int
    rule_hash: str | None


def claim_run(
    session: Session, run_id: str, worker: str, lease_until: datetime
) -> ClaimedRun | None:
    """Move a queued run to running under this worker's lease; None if someone else has it.

    The rule's current content hash comes back in the same statement (None if the rule was
    deleted); workers keep parsed rules by hash, so the document is read only on a miss.
    """
    of_rule = RULES.c.id == RUNS.c.rule_id
    row = session.execute(
        update(RUNS)
        .where(RUNS.c.id == run_id, RUNS.c.status == RunStatus.QUEUED)
        .values(
            status=RunStatus.RUNNING,
            worker=worker,
            lease_expires_at=lease_until,
            started_at=func.coalesce(RUNS.c.started_at, utcnow()),
            attempt=RUNS.c.attempt + 1,
        )
        .returning(
            RUNS.c.id,
            RUNS.c.rule_id,
            RUNS.c.rule_version,
            RUNS.c.trigger,
            RUNS.c.attempt,
            select(RULES.c.content_hash).where(of_rule).scalar_subquery(),
        )
    ).first()
    return None if row is None else ClaimedRun(*row)


def renew_lease(session: Session, run_id: str, worker: str, lease_until: datetime) -> bool:
    """Extend a running run's lease; False when the run is no longer this worker's to run."""
    result = session.execute(
        update(RUNS)
        .where(RUNS.c.id == run_id, RUNS.c.worker == worker, RUNS.c.status == RunStatus.RUNNING)
        .values(lease_expires_at=lease_until)
        .returning(RUNS.c.id)
    )
    return result.scalar_one_or_none() is not None


@dataclass(frozen=True)
class StepRecord:
    """One step as the runner reports it: started, or finished with its outcome."""

    run_id: str
    index: int
    step_id: str
    action_type: str
    started_at: datetime
    status: StepStatus = StepStatus.RUNNING
    finished_at: datetime | None = None
    exit_code: int | None = None
    output: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def values(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "index": self.index,
            "step_id": self.step_id,
            "action_type": self.action_type,
            "started_at": self.started_at,
            "status": self.status,
            "finished_at": self.finished_at,
            "exit_code": self.exit_code,
            "output": self.output,
            "result": self.result,
            "error": self.error[:MAX_ERROR] if self.error else self.error,
        }


def announce_step(session: Session, step: StepRecord) -> None:
    """Show a step as running; a no-op if its outcome was recorded first (a race we allow)."""
    session.execute(
        _insert(session, STEPS)
        .values(**step.values())
        .on_conflict_do_nothing(index_elements=["run_id", "index"])
    )


def _record_step_stmt(session: Session, step: StepRecord) -> Any:
    values = step.values()
    stmt = _insert(session, STEPS).values(**values)
    changed = {k: v for k, v in values.items() if k not in ("run_id", "index", "started_at")}
    return stmt.on_conflict_do_update(index_elements=["run_id", "index"], set_=changed)


def record_step(session: Session, step: StepRecord) -> None:
    """Record a step's outcome, whether or not it was announced as running."""
    session.execute(_record_step_stmt(session, step))


def finish_run(
    session: Session,
    run_id: str,
    worker: str | None,
    status: RunStatus,
    error: str | None = None,
    last_step: StepRecord | None = None,
) -> bool:
    """Record a running run's outcome (and its last step's); False if it was not `worker`'s.

    On PostgreSQL the step and the run are written by one statement (a data-modifying CTE);
    SQLite takes two, and a crash between them leaves a running run for the recovery sweep.
    """
    conditions = [RUNS.c.id == run_id, RUNS.c.status == RunStatus.RUNNING]
    if worker is not None:
        conditions.append(RUNS.c.worker == worker)
    stmt = (
        update(RUNS)
        .where(*conditions)
        .values(
            status=status,
            error=error[:MAX_ERROR] if error else error,
            finished_at=utcnow(),
            lease_expires_at=None,
        )
        .returning(RUNS.c.id)
    )
    if last_step is not None:
        step_stmt = _record_step_stmt(session, last_step)
        if session.get_bind().dialect.name == "postgresql":
            stmt = stmt.add_cte(step_stmt.returning(STEPS.c.id).cte("last_step"))
        else:
            session.execute(step_stmt)
    return session.execute(stmt).scalar_one_or_none() is not None


def list_steps(session: Session, run_id: str) -> Sequence[RunStepRow]:
    """The run's steps in order."""
    return session.scalars(
        select(RunStepRow).where(RunStepRow.run_id == run_id).order_by(RunStepRow.index)
    ).all()


def append_event(
    session: Session, run_id: str, kind: str, data: dict[str, Any], step_index: int | None = None
) -> None:
    """Append one line to the run's transcript."""
    session.execute(
        insert(EVENTS).values(
            run_id=run_id, kind=kind, data=data, step_index=step_index, at=utcnow()
        )
    )


def list_events(session: Session, run_id: str) -> Sequence[RunEventRow]:
    """The run's transcript in order."""
    return session.scalars(
        select(RunEventRow).where(RunEventRow.run_id == run_id).order_by(RunEventRow.id)
    ).all()


# --- listing with cursor pagination ---------------------------------------------------------


class InvalidCursorError(InvalidInputError):
    """The pagination cursor is not one this API handed out."""


@dataclass(frozen=True)
class RunFilter:
    """Filters of the run history; all given ones must match."""

    rule_id: str | None = None
    status: str | None = None
    trigger_type: str | None = None
    since: datetime | None = None


def encode_cursor(row: RunRow) -> str:
    """An opaque cursor pointing after `row` in newest-first order."""
    raw = f"{row.queued_at.isoformat()}|{row.id}"
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor.encode()).decode()
        stamp, run_id = raw.split("|", 1)
        when = datetime.fromisoformat(stamp)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursorError(
            f"cursor {cursor!r} is not valid; pass the `next_cursor` of a previous page"
        ) from None
    if when.tzinfo is None:
        raise InvalidCursorError(f"cursor {cursor!r} is not valid; pass a `next_cursor` value")
    return when, run_id


def list_runs(
    session: Session, filters: RunFilter, *, limit: int = DEFAULT_PAGE, cursor: str | None = None
) -> tuple[Sequence[RunRow], str | None]:
    """One page of runs, newest first, and the cursor of the next page (None on the last)."""
    limit = max(1, min(limit, MAX_PAGE))
    stmt = select(RunRow)
    if filters.rule_id:
        stmt = stmt.where(RunRow.rule_id == filters.rule_id)
    if filters.status:
        stmt = stmt.where(RunRow.status == filters.status)
    if filters.trigger_type:
        stmt = stmt.where(RunRow.trigger_type == filters.trigger_type)
    if filters.since:
        stmt = stmt.where(RunRow.queued_at >= filters.since)
    if cursor:
        when, run_id = _decode_cursor(cursor)
        stmt = stmt.where(
            or_(RunRow.queued_at < when, and_(RunRow.queued_at == when, RunRow.id < run_id))
        )
    rows = session.scalars(
        stmt.order_by(RunRow.queued_at.desc(), RunRow.id.desc()).limit(limit + 1)
    ).all()
    if len(rows) > limit:
        return rows[:limit], encode_cursor(rows[limit - 1])
    return rows, None


# --- recovery ---------------------------------------------------------------------------------


def take_unsent_runs(session: Session, older_than: timedelta, limit: int = 500) -> list[RunRow]:
    """Queued runs whose last send is older than the bound; marks them re-sent now.

    The conditional UPDATE means two sweeps running at once never re-send the same run twice.
    """
    now = utcnow()
    cutoff = now - older_than
    candidates = session.scalars(
        select(RunRow.id)
        .where(
            RunRow.status == RunStatus.QUEUED,
            func.coalesce(RunRow.sent_at, RunRow.queued_at) <= cutoff,
        )
        .order_by(RunRow.queued_at)
        .limit(limit)
    ).all()
    taken: list[RunRow] = []
    for run_id in candidates:
        got = session.execute(
            update(RunRow)
            .where(
                RunRow.id == run_id,
                RunRow.status == RunStatus.QUEUED,
                func.coalesce(RunRow.sent_at, RunRow.queued_at) <= cutoff,
            )
            .values(sent_at=now, send_count=RunRow.send_count + 1)
            .returning(RunRow.id)
        ).scalar_one_or_none()
        if got is not None:
            row = session.get(RunRow, run_id)
            if row is not None:
                taken.append(row)
    return taken


def fail_expired_leases(session: Session, now: datetime | None = None) -> list[str]:
    """End running runs whose worker stopped renewing its lease: status failed, "worker lost"."""
    now = now or utcnow()
    expired = session.scalars(
        select(RunRow.id).where(RunRow.status == RunStatus.RUNNING, RunRow.lease_expires_at < now)
    ).all()
    failed = []
    for run_id in expired:
        result = session.execute(
            update(RunRow)
            .where(
                RunRow.id == run_id,
                RunRow.status == RunStatus.RUNNING,
                RunRow.lease_expires_at < now,
            )
            .values(
                status=RunStatus.FAILED,
                finished_at=now,
                lease_expires_at=None,
                error=(
                    "worker lost: the worker running this run stopped renewing its lease "
                    "(it crashed or was killed); trigger the rule again to retry"
                ),
            )
            .returning(RunRow.id)
        ).scalar_one_or_none()
        if result is not None:
            session.execute(
                update(RunStepRow)
                .where(RunStepRow.run_id == run_id, RunStepRow.status == StepStatus.RUNNING)
                .values(status=StepStatus.FAILED, finished_at=now, error="worker lost")
            )
            append_event(session, run_id, "run.worker_lost", {"worker_lease_expired": True})
            failed.append(run_id)
    return failed
