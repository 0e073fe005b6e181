"""Query functions for lanes and their deferred deletions (`scheduled_cleanups`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.schema import LaneRow, ScheduledCleanupRow
from ade_tasks.errors import ConflictError, NotFoundError
from ade_tasks.json_document import JsonObject
from ade_tasks.states import CleanupStatus, LaneStatus


@dataclass(frozen=True)
class LaneRef:
    """A lane as steps see it: its row id, name, branch, worktree path and base."""

    id: str
    name: str
    branch: str
    path: Path
    base_ref: str
    base_sha: str

    def to_dict(self) -> JsonObject:
        """JSON-ready, as recorded in a create-lane step's result and in lane triggers."""
        return {
            "id": self.id,
            "name": self.name,
            "branch": self.branch,
            "path": str(self.path),
            "base_ref": self.base_ref,
            "base_sha": self.base_sha,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaneRef:
        return cls(
            id=str(data.get("id", "")),
            name=str(data["name"]),
            branch=str(data["branch"]),
            path=Path(str(data["path"])),
            base_ref=str(data.get("base_ref", "")),
            base_sha=str(data.get("base_sha", "")),
        )

    @classmethod
    def from_trigger(cls, trigger: Mapping[str, Any]) -> LaneRef | None:
        """The lane a `lane.*` trigger is about, if any."""
        lane = trigger.get("lane")
        return cls.from_dict(lane) if isinstance(lane, dict) and "path" in lane else None


def lane_ref(row: LaneRow) -> LaneRef:
    """The lane of a row."""
    return LaneRef(row.id, row.name, row.branch, Path(row.path), row.base_ref, row.base_sha)


def record_lane(session: Session, project: str, lane: LaneRef, run_id: str | None) -> LaneRef:
    """Record a lane just created; returns it with its row id."""
    lane_id = str(uuid.uuid4())
    session.add(
        LaneRow(
            id=lane_id,
            project=project,
            name=lane.name,
            branch=lane.branch,
            path=str(lane.path),
            base_ref=lane.base_ref,
            base_sha=lane.base_sha,
            run_id=run_id,
            status=LaneStatus.ACTIVE,
            created_at=utcnow(),
        )
    )
    return LaneRef(lane_id, lane.name, lane.branch, lane.path, lane.base_ref, lane.base_sha)


def active_lane(session: Session, project: str, name: str) -> LaneRow | None:
    """The project's active lane of that name (the newest, should names repeat over time)."""
    return session.scalar(
        select(LaneRow)
        .where(LaneRow.project == project, LaneRow.name == name)
        .where(LaneRow.status == LaneStatus.ACTIVE)
        .order_by(LaneRow.created_at.desc())
        .limit(1)
    )


def lanes_on_branch(session: Session, branch: str) -> Sequence[LaneRow]:
    """The lanes (of any project, active or deleted) whose branch is `branch`."""
    return session.scalars(select(LaneRow).where(LaneRow.branch == branch)).all()


def get_lane(session: Session, lane_id: str) -> LaneRow:
    """The lane row, or NotFoundError."""
    row = session.get(LaneRow, lane_id)
    if row is None:
        raise NotFoundError(f"lane {lane_id!r} does not exist; list lanes with `ade-tasks lanes`")
    return row


def mark_deleted(session: Session, lane_id: str) -> None:
    """The lane's worktree and branch are gone."""
    session.execute(
        update(LaneRow)
        .where(LaneRow.id == lane_id)
        .values(status=LaneStatus.DELETED, deleted_at=utcnow())
    )


def list_lanes(session: Session, status: str | None = LaneStatus.ACTIVE) -> Sequence[LaneRow]:
    """Lanes, newest first."""
    stmt = select(LaneRow).order_by(LaneRow.created_at.desc()).limit(500)
    if status:
        stmt = stmt.where(LaneRow.status == status)
    return session.scalars(stmt).all()


# --- scheduled cleanups ---------------------------------------------------------------------


def schedule_cleanup(
    session: Session,
    *,
    run_id: str,
    step_id: str,
    lane_id: str,
    due_at: datetime,
    force: bool,
    delete_remote: str | None,
    delete_branch: bool = True,
) -> int:
    """Defer a lane's deletion; returns the cleanup's id."""
    row = ScheduledCleanupRow(
        run_id=run_id,
        step_id=step_id,
        lane_id=lane_id,
        force=force,
        delete_remote=delete_remote,
        delete_branch=delete_branch,
        due_at=due_at,
        status=CleanupStatus.SCHEDULED,
        attempts=0,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row.id


def claim_due_cleanups(
    session: Session, worker: str, now: datetime, limit: int = 20
) -> list[ScheduledCleanupRow]:
    """Move due cleanups `scheduled -> executing` for this sweeper (a conditional UPDATE per
    row, so two sweeps never take the same one)."""
    due = session.scalars(
        select(ScheduledCleanupRow.id)
        .where(
            ScheduledCleanupRow.status == CleanupStatus.SCHEDULED,
            ScheduledCleanupRow.due_at <= now,
        )
        .order_by(ScheduledCleanupRow.due_at)
        .limit(limit)
    ).all()
    claimed = []
    for cleanup_id in due:
        got = session.execute(
            update(ScheduledCleanupRow)
            .where(
                ScheduledCleanupRow.id == cleanup_id,
                ScheduledCleanupRow.status == CleanupStatus.SCHEDULED,
            )
            .values(
                status=CleanupStatus.EXECUTING,
                claimed_by=worker,
                claimed_at=now,
                attempts=ScheduledCleanupRow.attempts + 1,
            )
            .returning(ScheduledCleanupRow.id)
        ).scalar_one_or_none()
        if got is not None:
            row = session.get(ScheduledCleanupRow, cleanup_id, populate_existing=True)
            assert row is not None
            claimed.append(row)
    return claimed


def reset_stale_cleanups(session: Session, now: datetime, stale_after: timedelta) -> int:
    """Return cleanups whose sweeper died mid-deletion to `scheduled` (deletion is idempotent,
    so the next sweep completes what it started)."""
    result = session.execute(
        update(ScheduledCleanupRow)
        .where(
            ScheduledCleanupRow.status == CleanupStatus.EXECUTING,
            ScheduledCleanupRow.claimed_at < now - stale_after,
        )
        .values(status=CleanupStatus.SCHEDULED, claimed_by=None)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def finish_cleanup(
    session: Session,
    cleanup_id: int,
    status: CleanupStatus,
    result: JsonObject | None,
    error: str | None,
) -> None:
    """Record how a claimed cleanup ended."""
    session.execute(
        update(ScheduledCleanupRow)
        .where(ScheduledCleanupRow.id == cleanup_id)
        .values(status=status, result=result, error=error, finished_at=utcnow())
    )


def list_cleanups(session: Session, status: str | None = None) -> Sequence[ScheduledCleanupRow]:
    """Scheduled cleanups, soonest first."""
    stmt = select(ScheduledCleanupRow).order_by(ScheduledCleanupRow.due_at).limit(500)
    if status:
        stmt = stmt.where(ScheduledCleanupRow.status == status)
    return session.scalars(stmt).all()


def cancel_cleanup(session: Session, cleanup_id: int) -> ScheduledCleanupRow:
    """Cancel a cleanup that has not started; ConflictError once it has."""
    row = session.get(ScheduledCleanupRow, cleanup_id, with_for_update=True)
    if row is None:
        raise NotFoundError(
            f"scheduled cleanup {cleanup_id} does not exist; list them with "
            "`ade-tasks cleanups list` (or an ade-action cleanups.list step)"
        )
    if row.status != CleanupStatus.SCHEDULED:
        raise ConflictError(
            f"scheduled cleanup {cleanup_id} is {row.status}; only scheduled cleanups can be "
            "cancelled"
        )
    row.status = CleanupStatus.CANCELLED
    row.finished_at = utcnow()
    return row
