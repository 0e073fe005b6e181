"""The runner's journal: how the steps and the outcome of a run are recorded.

A finished step is recorded before the next one starts, and the run's last step together with
its outcome (and the run-seconds it charges) in one statement; a run that waits for a human
is parked on an approval or a pending input. Records of what a step or run achieved are
retried through a database outage, so a step that finished is not lost to a blip after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TypeVar

from ade_tasks.clock import utcnow
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_recovery as run_recovery_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import usage as usage_db
from ade_tasks.db.direct import Statements
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.retry import UnitsOfWork, retrying
from ade_tasks.db.run_steps import StepRecord
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.approval_policy import gate_policy
from ade_tasks.rules.steps import Action
from ade_tasks.states import RunStatus
from ade_workers.actions.agent_session import park_for_tool
from ade_workers.actions.executor import StepOutcome
from ade_workers.engine.run_monitor import Watch
from ade_workers.engine.run_plan import RunPlan
from ade_workers.engine.runner_config import INTERRUPTED

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How often a finished step's record or the run's outcome is tried through a database outage
#: (with `ade_tasks.db.retry`'s backoff: about 20 seconds in all).
FINISH_ATTEMPTS = 22


def finished(step: StepRecord, outcome: StepOutcome) -> StepRecord:
    """The record of a started step, now ended with `outcome`."""
    return replace(
        step,
        status=outcome.status,
        finished_at=utcnow(),
        exit_code=outcome.exit_code,
        output=outcome.output,
        result=outcome.result,
        error=outcome.error,
    )


def record_step(writes: UnitsOfWork[Statements], step: StepRecord | None) -> None:
    """Record a finished step that is not the run's last (that one goes with the outcome)."""
    if step is not None:
        durably(writes, partial(run_steps_db.record_step, step=step), f"run {step.run_id}: step")


def durably(writes: UnitsOfWork[Statements], write: Callable[[Statements], T], what: str) -> T:
    """A write of what a step or run achieved, retried through a database outage of up to
    about 20 seconds: a step that finished must not be lost to a bookkeeping blip after it."""
    return retrying(writes, write, what=what, attempts=FINISH_ATTEMPTS)


def end_run(
    session: Statements,
    run_id: str,
    worker: str,
    status: RunStatus,
    error: str | None,
    last_step: StepRecord | None = None,
    verdict: runs_db.RunVerdict | None = None,
    charge: usage_db.Charge | None = None,
) -> RunStatus | None:
    """Finish the run (and record its last step, and charge its run-seconds); None if it was
    no longer ours."""
    if not runs_db.finish_run(session, run_id, worker, status, error, last_step, verdict, charge):
        return None
    log.info("run %s finished: %s%s", run_id, status, f" ({error})" if error else "")
    return status


def park_for_approval(
    sessions: SessionFactory,
    run_id: str,
    worker: str,
    index: int,
    plan: RunPlan,
    pending: StepRecord | None,
) -> RunStatus | None:
    """Stop the run in `waiting` until an operator approves or rejects it."""
    rule = plan.rule
    what = (
        "publishing its result"
        if index == len(plan.actions)
        else f"step #{index + 1}, its first side-effecting step"
    )
    policy = gate_policy(rule, plan.trigger)
    who = "a human" if policy.needed == 1 else f"{policy.needed} people"
    if policy.excluded:
        who += f" other than {policy.excluded} (who asked for the run)"
    reason = (
        f"rule {rule.id!r} requires {who} to approve before {what}; approve or reject it "
        f"with `ade-tasks runs approve {run_id}` / `ade-tasks runs reject {run_id}`"
    )
    with sessions.begin() as session:
        if pending is not None:
            run_steps_db.record_step(session, pending)
        if not approvals_db.wait_for_approval(
            session, run_id, worker, index, reason, policy=policy
        ):
            return None
    log.info("run %s is waiting for approval before step %d", run_id, index)
    return RunStatus.WAITING


def park_for_tool_call(
    sessions: SessionFactory, run_id: str, worker: str, pending: JsonObject
) -> RunStatus | None:
    """Park the run until an operator answers the agent's tool call; None if it was not ours."""
    if not park_for_tool(sessions, run_id, worker, pending):
        return None
    log.info("run %s is waiting for an answer on tool call %s", run_id, pending["tool"])
    return RunStatus.WAITING


def may_rerun(
    sessions: SessionFactory, run_id: str, action: Action, index: int, plan: RunPlan
) -> bool:
    """May this run's first unfinished step run (again)? Not when a lost worker interrupted it
    and it has no `retry` left; an agent session always continues from its recorded events.

    The step counts as interrupted even if its lost worker had not yet started it (that window
    is one statement long): running a command twice without the rule's leave is the worse
    mistake.
    """
    lost = plan.interruption
    if lost is None or not lost.pending:
        return True
    rerun = action.type == "agent-session" or lost.reruns.get(index, 0) < int(action.retry)
    with sessions.begin() as session:
        run_events_db.append_event(
            session, run_id, run_recovery_db.INTERRUPTED_EVENT, {"index": index, "rerun": rerun}
        )
    log.warning(
        "run %s: step %d was interrupted by a lost worker; %s",
        run_id, index + 1, "running it again" if rerun else "recording it failed",
    )  # fmt: skip
    return rerun


def why_stopped(sessions: SessionFactory, run_id: str, monitor: Watch) -> str:
    """Why a run this worker took ended without an outcome of its own: it was cancelled (maybe
    after the monitor's last look, while its outcome was being written) or interrupted."""
    if monitor.cancelled.is_set():
        return RunStatus.CANCELLED
    try:
        with sessions.begin() as session:
            cancelled = runs_db.is_cancelled(session, run_id)
    except Exception:  # only the console line depends on it
        cancelled = False
    return RunStatus.CANCELLED if cancelled else INTERRUPTED
