"""Query functions of the recovery sweep: queued runs whose message the broker lost (re-sent),
running runs whose worker died (queued again, or failed after too many losses), and what the
worker that resumes such a run reads of the losses before it.

The orchestration (what to send, how often) is `ade_tasks.runs.recovery`; what the resuming worker
does with the interrupted step is `ade_workers.engine.runner`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.run_events import EVENTS, append_event
from ade_tasks.db.schema import RunRow, RunStepRow
from ade_tasks.states import FAIL_LOST, RESUME_LOST, RunStatus, StepStatus

#: How often the sweep puts a run whose worker died back in the queue; after that the run
#: fails, so a run that kills its worker (e.g. runs it out of memory) cannot loop.
MAX_WORKER_LOST_RESUMES = 2
RESUMED_EVENT = "run.resumed_after_worker_lost"
#: Written by the worker that resumes a run: what it did with the step its lost worker ran.
INTERRUPTED_EVENT = "run.step_interrupted"
#: The error of the step that was running when its worker died and may not run again.
STEP_WORKER_LOST = (
    "worker lost while this step ran (the worker crashed or was killed); its processes were "
    "killed with it. Set `retry` on the step to run it again on another worker, or trigger "
    "the rule again"
)


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
            RunRow.buffered.is_(False),
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


@dataclass(frozen=True)
class ExpiredLeases:
    """What the lease sweep did: runs it failed, and runs it queued again (to send now)."""

    failed: list[str] = field(default_factory=list)
    resumed: list[RunRow] = field(default_factory=list)


def _worker_lost_resumes(session: Session, run_id: str) -> int:
    """How often the run was put back in the queue after losing its worker."""
    return int(
        session.execute(
            select(func.count()).where(EVENTS.c.run_id == run_id, EVENTS.c.kind == RESUMED_EVENT)
        ).scalar_one()
    )


@dataclass(frozen=True)
class Interruption:
    """A run resumed after its worker was lost, as the resuming worker sees it."""

    pending: bool  # a resume nobody handled yet: the first unfinished step was interrupted
    reruns: dict[int, int]  # step index -> how often it already ran again after a loss


def interruption_of(session: Session, run_id: str) -> Interruption:
    """What the earlier losses of this run's workers left for the next attempt to decide."""
    rows = session.execute(
        select(EVENTS.c.kind, EVENTS.c.data)
        .where(EVENTS.c.run_id == run_id, EVENTS.c.kind.in_((RESUMED_EVENT, INTERRUPTED_EVENT)))
    ).all()  # fmt: skip
    resumes = sum(1 for kind, _ in rows if kind == RESUMED_EVENT)
    handled = [data for kind, data in rows if kind == INTERRUPTED_EVENT]
    reruns: dict[int, int] = {}
    for data in handled:
        if data.get("rerun"):
            reruns[int(data["index"])] = reruns.get(int(data["index"]), 0) + 1
    return Interruption(pending=resumes > len(handled), reruns=reruns)


def fail_expired_leases(session: Session, now: datetime | None = None) -> ExpiredLeases:
    """Queue again the running runs whose worker stopped renewing its lease (it died).

    The next worker continues the run after its last finished step (every finished step is
    recorded before the next one starts) and decides what to do with the step that was running
    when the worker died (see `ade_workers.engine.runner`): an agent session continues from its
    recorded events; another step runs again only if its `retry` allows it, and is otherwise
    recorded failed, its command having been killed with its worker. A run that lost its worker
    MAX_WORKER_LOST_RESUMES times already fails instead, "worker lost". A step left `running`
    stays so while the run is queued again; the resumed attempt records its outcome over it.
    """
    now = now or utcnow()
    expired = session.scalars(
        select(RunRow.id).where(RunRow.status == RunStatus.RUNNING, RunRow.lease_expires_at < now)
    ).all()
    done = ExpiredLeases()
    for run_id in expired:
        still_expired = (
            RunRow.id == run_id,
            RunRow.status.in_(RESUME_LOST.sources & FAIL_LOST.sources),
            RunRow.lease_expires_at < now,
        )
        resumes = _worker_lost_resumes(session, run_id)
        if resumes < MAX_WORKER_LOST_RESUMES:
            # Marked sent now: the caller sends it, and `take_unsent_runs` only if that fails.
            resumed = session.execute(
                update(RunRow)
                .where(*still_expired)
                .values(
                    status=RunStatus.QUEUED,
                    worker=None,
                    lease_expires_at=None,
                    sent_at=now,
                    send_count=RunRow.send_count + 1,
                )
                .returning(RunRow.id)
            ).scalar_one_or_none()
            if resumed is not None:
                append_event(session, run_id, RESUMED_EVENT, {"resume": resumes + 1})
                row = session.get(RunRow, run_id)
                assert row is not None
                done.resumed.append(row)
            continue
        error = (
            f"worker lost: the run lost its worker again after it was resumed {resumes} times "
            f"(at most {MAX_WORKER_LOST_RESUMES}); trigger the rule again"
        )
        result = session.execute(
            update(RunRow)
            .where(*still_expired)
            .values(status=RunStatus.FAILED, finished_at=now, lease_expires_at=None, error=error)
            .returning(RunRow.id)
        ).scalar_one_or_none()
        if result is not None:
            session.execute(
                update(RunStepRow)
                .where(RunStepRow.run_id == run_id, RunStepRow.status == StepStatus.RUNNING)
                .values(status=StepStatus.FAILED, finished_at=now, error="worker lost")
            )
            append_event(session, run_id, "run.worker_lost", {"worker_lease_expired": True})
            done.failed.append(run_id)
    return done
