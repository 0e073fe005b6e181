"""Query functions that cancel runs: one run (an operator, the CLI, `ade-action runs.cancel`),
all of a rule's active ones (overlap `cancel-other`), or those of one concurrency key that a new
run supersedes, and what every cancel leaves behind.

A cancelled run's worker learns of it from `ade_tasks.db.runs.is_cancelled` within half a
second and kills everything its step started.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.run_events import append_event
from ade_tasks.db.run_steps import STEPS
from ade_tasks.db.runs import RUNS, get_run
from ade_tasks.db.schema import MAX_ERROR, ApprovalRow, RunRow
from ade_tasks.errors import ConflictError, IllegalTransitionError
from ade_tasks.states import CANCEL, FINAL_STATUSES, ApprovalStatus, RunStatus, StepStatus

CANCELLED_EVENT = "run.cancelled"


def _reason(by: str, note: str | None) -> str:
    """The error a cancelled run and its running steps record."""
    return (f"cancelled by {by}" + (f": {note}" if note else ""))[:MAX_ERROR]


def cancel_run(
    session: Session, run_id: str, by: str, note: str | None = None
) -> tuple[RunRow, str]:
    """Cancel a queued, waiting or running run; returns it and the status it had. The one
    cancel of a single run: the API, the CLI and `ade-action runs.cancel` all come here.

    A queued run's message (if any) finds it cancelled and does nothing; a running run's
    worker sees it within half a second (`is_cancelled`) and kills everything the step's
    command started (as for overlap `cancel-other`). Its running steps are marked failed,
    its pending approvals cancelled and the transcript says who cancelled it.
    IllegalTransitionError (a ConflictError) when the run already finished.
    """
    for _ in range(5):  # the run may move (queued -> running) between the read and the update
        row = get_run(session, run_id)
        was = row.status
        if was in FINAL_STATUSES:
            raise IllegalTransitionError(
                f"run {run_id} already finished ({was}); nothing to cancel"
            )
        CANCEL.check(was, RunStatus.CANCELLED)
        now = utcnow()
        done = session.execute(
            update(RUNS)
            .where(RUNS.c.id == run_id, RUNS.c.status == was)
            .values(status=RunStatus.CANCELLED, error=_reason(by, note), finished_at=now,
                    lease_expires_at=None, buffered=False)
            .returning(RUNS.c.id)
        ).scalar_one_or_none()  # fmt: skip
        session.expire(row)
        if done is None:
            continue
        _settle_cancelled(session, {run_id: was}, by, note, now)
        return get_run(session, run_id), was
    raise ConflictError(f"run {run_id} kept changing status; try cancelling it again")


def cancel_active(session: Session, rule_id: str, by: str, note: str) -> list[str]:
    """Cancel the rule's active and buffered runs (overlap `cancel-other`), settled as any
    cancel is; a running one's worker notices within half a second (`is_cancelled`) and kills
    everything the step started."""
    return _cancel_where(session, [RUNS.c.rule_id == rule_id], by, note, _reason(by, note))


def supersede(
    session: Session, rule_id: str, key: str, run_ids: list[str], by_run: str
) -> list[str]:
    """Cancel these runs of the rule that hold concurrency key `key` (queued, buffered, waiting
    or running), because run `by_run` supersedes them (`concurrency.on_new: supersede`): their
    error reads "superseded by run X", settled as any cancel is (a running one's worker stops
    its step within half a second; finished steps, the transcript and the lane stay)."""
    if not run_ids:
        return []
    where = [RUNS.c.rule_id == rule_id, RUNS.c.concurrency_key == key, RUNS.c.id.in_(run_ids)]
    note = f"concurrency key {key!r}, on_new: supersede"
    return _cancel_where(session, where, f"run {by_run}", note, f"superseded by run {by_run}")


def _cancel_where(session: Session, where: list[Any], by: str, note: str, error: str) -> list[str]:
    now = utcnow()
    active = (*where, RUNS.c.status.in_(CANCEL.sources))
    before = {
        row.id: row.status
        for row in session.execute(select(RUNS.c.id, RUNS.c.status).where(*active))
    }
    result = session.execute(
        update(RUNS)
        .where(*active)
        .values(
            status=RunStatus.CANCELLED,
            error=error[:MAX_ERROR],
            finished_at=now,
            lease_expires_at=None,
            buffered=False,
        )
        .returning(RUNS.c.id)
    )
    # A run claimed between the two statements was queued when read and is running now.
    was = {str(run_id): str(before.get(run_id, RunStatus.RUNNING)) for run_id in result.scalars()}
    if was:
        _settle_cancelled(session, was, by, note, now, error)
    return list(was)


def _settle_cancelled(
    session: Session,
    was: dict[str, str],
    by: str,
    note: str | None,
    now: datetime,
    error: str | None = None,
) -> None:
    """What every cancel leaves behind: the runs' running steps failed with the reason, their
    pending approvals cancelled (no operator is asked about a cancelled run), and a
    `run.cancelled` event saying who cancelled each and what it was."""
    run_ids = list(was)
    session.execute(
        update(STEPS)
        .where(STEPS.c.run_id.in_(run_ids), STEPS.c.status == StepStatus.RUNNING)
        .values(status=StepStatus.FAILED, finished_at=now, error=error or _reason(by, note))
    )
    session.execute(
        update(ApprovalRow)
        .where(ApprovalRow.run_id.in_(run_ids), ApprovalRow.status == ApprovalStatus.PENDING)
        .values(status=ApprovalStatus.CANCELLED, decided_by=by, decided_at=now, note=note)
    )
    for run_id, status in was.items():
        append_event(session, run_id, CANCELLED_EVENT, {"by": by, "note": note, "was": status})
