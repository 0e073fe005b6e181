"""The deferred lane-cleanup sweep: every 60 s, claimed by one beat, it deletes the lanes whose
`delete-lane ... after_minutes` came due.

A cleanup that fails fails the run it belongs to (a `succeeded` run becomes `failed`, with the
step's error), as ADE does: a run whose lane is left behind did not finish its work.

Each due row moves `scheduled -> executing` under this sweeper's name; the worktree, branch
(and remote branch, if asked) are deleted, the lane row is marked deleted, and the result is
appended to the original run as one more step. Deleting is idempotent, so a sweeper killed
mid-deletion leaves an `executing` row that the next sweep after `STALE_AFTER` returns to
`scheduled` and completes.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ade_tasks.db import lanes as lanes_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunStepRow, ScheduledCleanupRow
from ade_tasks.errors import AdeError
from ade_tasks.housekeeping import Job, register
from ade_tasks.json_document import JsonObject
from ade_tasks.runs.senders import RunSender
from ade_tasks.settings import Settings
from ade_tasks.states import CleanupStatus, StepStatus
from ade_tasks.triggers.local_events import emit_lane_event
from ade_workers.integrations import git_lanes as lanes

log = logging.getLogger(__name__)

EVERY = timedelta(seconds=60)
#: A cleanup still `executing` after this long lost its sweeper (deleting takes seconds).
STALE_AFTER = timedelta(minutes=5)


def sweep_cleanups(
    session_factory: SessionFactory,
    settings: Settings,
    sweeper: str,
    now: datetime,
    sender: RunSender | None = None,
) -> dict[str, int]:
    """Carry out the cleanups that are due; returns how many were done and failed."""
    with session_factory.begin() as session:
        reset = lanes_db.reset_stale_cleanups(session, now, STALE_AFTER)
        claimed = lanes_db.claim_due_cleanups(session, sweeper, now)
        session.expunge_all()
    done = failed = 0
    for cleanup in claimed:
        if _carry_out(session_factory, settings, cleanup, now, sender):
            done += 1
        else:
            failed += 1
    return {"done": done, "failed": failed, "reset": reset}


def _carry_out(
    session_factory: SessionFactory,
    settings: Settings,
    cleanup: ScheduledCleanupRow,
    now: datetime,
    sender: RunSender | None,
) -> bool:
    error: str | None = None
    result: JsonObject | None = None
    with session_factory.begin() as session:
        lane = lanes_db.lane_ref(lanes_db.get_lane(session, cleanup.lane_id))
        project = lanes_db.get_lane(session, cleanup.lane_id).project
    try:
        repo = lanes.require_repository(settings.project_root(project))
        deleted = lanes.delete_lane(
            repo,
            lane.path,
            lane.branch,
            force=cleanup.force,
            remote=cleanup.delete_remote,
            delete_branch=cleanup.delete_branch,
        )
        result = {"lane": {**lane.to_dict(), "deleted": True}, "note": deleted.note}
    except AdeError as exc:
        error = f"scheduled deletion of lane {lane.name!r} failed: {exc.message}"
        log.warning("cleanup %s: %s", cleanup.id, error)
    status = CleanupStatus.FAILED if error else CleanupStatus.DONE
    with session_factory.begin() as session:
        if error is None:
            lanes_db.mark_deleted(session, lane.id)
        lanes_db.finish_cleanup(session, cleanup.id, status, result, error)
        _append_step(session, cleanup, lane.name, result, error, now)
        if error is not None:  # the run's work is not done until its cleanup is
            failure = f"step {cleanup.step_id!r}: {error}"
            runs_db.fail_after_cleanup(session, cleanup.run_id, failure)
    if error is None and sender is not None:
        emit_lane_event(
            session_factory, sender, "lane.deleted", lane.to_dict(), project, cleanup.run_id
        )
    return error is None


def _append_step(
    session: Session,
    cleanup: ScheduledCleanupRow,
    lane_name: str,
    result: JsonObject | None,
    error: str | None,
    now: datetime,
) -> None:
    """The sweep's result becomes one more step of the run that scheduled it."""
    last = session.scalar(
        select(func.max(RunStepRow.index)).where(RunStepRow.run_id == cleanup.run_id)
    )
    if last is None:  # the run was pruned meanwhile: the cleanup row keeps the record
        return
    note = (result or {}).get("note", "")
    step = run_steps_db.StepRecord(
        run_id=cleanup.run_id,
        index=int(last) + 1,
        step_id=f"{cleanup.step_id}.cleanup",
        action_type="delete-lane",
        started_at=now,
        status=StepStatus.FAILED if error else StepStatus.SUCCEEDED,
        finished_at=now,
        output=f"lane {lane_name!r}: {note}" if not error else "",
        result={**(result or {}), "scheduled_cleanup": cleanup.id},
        error=error,
    )
    run_steps_db.record_step(session, step)


@register
def cleanup_job(session_factory: SessionFactory, sender: RunSender, settings: Settings) -> Job:
    """The sweep as a housekeeping job of every beat (each 60 s slot runs once)."""
    import os
    import socket

    sweeper = f"{socket.gethostname()}:{os.getpid()}"
    return Job(
        "lane-cleanups",
        EVERY,
        lambda now: sweep_cleanups(session_factory, settings, sweeper, now, sender),
    )
