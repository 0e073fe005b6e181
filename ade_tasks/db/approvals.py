"""Query functions for approvals: runs that wait for an operator's decision."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ade_tasks.db.schema import ApprovalRow, ApprovalStatus, RunRow, RunStatus, utcnow
from ade_tasks.errors import ConflictError


def wait_for_approval(
    session: Session,
    run_id: str,
    worker: str,
    step_index: int,
    reason: str,
    tool_call_id: str | None = None,
) -> bool:
    """Park a running run in `waiting` and open its approval; False if it was not ours."""
    parked = session.execute(
        update(RunRow)
        .where(RunRow.id == run_id, RunRow.worker == worker, RunRow.status == RunStatus.RUNNING)
        .values(status=RunStatus.WAITING, lease_expires_at=None)
        .returning(RunRow.id)
    ).scalar_one_or_none()
    if parked is None:
        return False
    if approval_for(session, run_id, step_index) is None:
        session.add(
            ApprovalRow(
                run_id=run_id,
                step_index=step_index,
                reason=reason,
                status=ApprovalStatus.PENDING,
                tool_call_id=tool_call_id,
                requested_at=utcnow(),
            )
        )
    return True


def approval_for(session: Session, run_id: str, step_index: int) -> ApprovalRow | None:
    """The approval asked for before step `step_index` of the run, if any."""
    return session.scalar(
        select(ApprovalRow).where(
            ApprovalRow.run_id == run_id, ApprovalRow.step_index == step_index
        )
    )


def pending_approval(session: Session, run_id: str) -> ApprovalRow:
    """The run's open approval, or ConflictError saying why there is none."""
    row = session.scalar(
        select(ApprovalRow)
        .where(ApprovalRow.run_id == run_id, ApprovalRow.status == ApprovalStatus.PENDING)
        .with_for_update()
    )
    if row is None:
        raise ConflictError(
            f"run {run_id!r} is not waiting for an approval; only runs in status `waiting` "
            "can be approved or rejected (see `ade-tasks runs show`)"
        )
    return row


def decide(
    session: Session, row: ApprovalRow, approve: bool, by: str, note: str | None, at: datetime
) -> None:
    """Record the decision and move the run on: back to `queued` (the caller sends it) or
    `cancelled` with the operator's reason."""
    row.status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
    row.decided_by, row.decided_at, row.note = by, at, note
    values: dict[str, object]
    if approve or row.tool_call_id is not None:
        # A declined tool call is not the end of the session: the agent is told and goes on.
        values = {"status": RunStatus.QUEUED, "sent_at": at, "send_count": RunRow.send_count + 1}
    else:
        reason = f"rejected by {by}" + (f": {note}" if note else "")
        values = {"status": RunStatus.CANCELLED, "finished_at": at, "error": reason}
    session.execute(
        update(RunRow)
        .where(RunRow.id == row.run_id, RunRow.status == RunStatus.WAITING)
        .values(**values)
    )


def list_approvals(session: Session, status: str | None = "pending") -> Sequence[ApprovalRow]:
    """Approvals, newest first (pending ones by default)."""
    stmt = select(ApprovalRow).order_by(ApprovalRow.requested_at.desc()).limit(500)
    if status:
        stmt = stmt.where(ApprovalRow.status == status)
    return session.scalars(stmt).all()


def approved_steps(session: Session, run_id: str) -> frozenset[int]:
    """Indexes of the steps an operator approved the run to start."""
    rows = session.scalars(
        select(ApprovalRow.step_index).where(
            ApprovalRow.run_id == run_id, ApprovalRow.status == ApprovalStatus.APPROVED
        )
    )
    return frozenset(rows)


def approvals_of(session: Session, run_id: str) -> Sequence[ApprovalRow]:
    """The run's approvals, in step order."""
    return session.scalars(
        select(ApprovalRow).where(ApprovalRow.run_id == run_id).order_by(ApprovalRow.step_index)
    ).all()


def tool_decisions(session: Session, run_id: str) -> tuple[frozenset[str], frozenset[str]]:
    """The run's tool calls an operator approved, and the ones declined."""
    rows = session.execute(
        select(ApprovalRow.tool_call_id, ApprovalRow.status).where(
            ApprovalRow.run_id == run_id, ApprovalRow.tool_call_id.is_not(None)
        )
    ).all()
    approved = frozenset(str(c) for c, s in rows if s == ApprovalStatus.APPROVED)
    declined = frozenset(str(c) for c, s in rows if s == ApprovalStatus.REJECTED)
    return approved, declined
