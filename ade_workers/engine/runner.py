"""Execute one run: claim it, run its steps in order under a heartbeat lease, record the outcome.

No database session is held while a step runs, and every state change is one statement that
commits on its own (see `ade_tasks.db.engine.autocommit`): the claim, a step's outcome, the
run's outcome together with its last step's, and the run's seconds added to its billing code's
usage. A step that runs longer than `ANNOUNCE_AFTER` is shown as running by the process's
monitor thread; a one-step run of a short command thus costs three statements from claim to
finish. The semantics of the steps themselves live in `ade_workers.engine.chain`; the lease and the
cancel check in `run_monitor`, the plan of a claimed run in `run_plan`, the steps' context in
`step_context`, and how steps and outcomes are recorded in `step_journal`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import timedelta
from functools import partial

from sqlalchemy.orm import Session

from ade_tasks.agents.protected import engine_secrets
from ade_tasks.clock import utcnow
from ade_tasks.db import run_recovery as run_recovery_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.direct import Statements, direct_statements, durable_writes
from ade_tasks.db.engine import SessionFactory, autocommit
from ade_tasks.db.retry import UnitsOfWork, is_connection_lost, retrying
from ade_tasks.db.run_steps import StepRecord
from ade_tasks.errors import AdeError, DatabaseUnavailableError
from ade_tasks.guardrails import registry as guardrails
from ade_tasks.guardrails.guardrail import Admission, Deadline
from ade_tasks.rules.outputs import Disposition
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import Action, RunCommandAction
from ade_tasks.runs import concurrency_keys
from ade_tasks.runs.dispatch import release_buffered
from ade_tasks.runs.review import review
from ade_tasks.secrets import Masker
from ade_tasks.states import FINAL_STATUSES, RunStatus, StepStatus
from ade_tasks.triggers.finished_runs import emit_after_finish
from ade_workers.actions.executor import StepOutcome
from ade_workers.engine.chain import ChainState, StepRun, run_step
from ade_workers.engine.publish import publish
from ade_workers.engine.run_monitor import SHUTDOWN, SHUTDOWN_ERROR, Watch
from ade_workers.engine.run_plan import RunPlan, plan_run
from ade_workers.engine.runner_config import INTERRUPTED, STARTED, RunnerConfig
from ade_workers.engine.step_context import base_context, execute_step, find_lane
from ade_workers.engine.step_journal import (
    durably,
    end_run,
    finished,
    may_rerun,
    park_for_approval,
    park_for_tool_call,
    record_step,
    why_stopped,
)

log = logging.getLogger(__name__)


def execute_run(
    session_factory: SessionFactory, config: RunnerConfig, run_id: str, worker: str
) -> RunStatus | None:
    """Run a queued run to its end; None when it was not ours to run (claimed or finished), or
    stopped without an outcome of its own (cancelled, lease lost)."""
    settings = config.settings
    sessions = autocommit(session_factory)
    writes = durable_writes(session_factory)
    direct = direct_statements(session_factory)
    started = time.monotonic()
    lease_until = utcnow() + timedelta(seconds=settings.lease_seconds)
    claimed_rule: list[str] = []  # the rule of the run, once the claim held

    def claim_and_plan(session: Session) -> tuple[RunPlan, Deadline] | RunStatus | None:
        # One unit of work, so one connection checkout; repeating it after a lost connection
        # is safe because a claim repeated by its own worker holds (`runs_db.claim_run`).
        # On PostgreSQL the claim goes by the driver (db.direct); the session below connects
        # only if the plan needs a read (a rule this process has not parsed, a resumed run).
        claimed = runs_db.claim_run(direct or session, run_id, worker, lease_until)
        if claimed is None:
            log.info("run %s is already claimed or finished; nothing to do", run_id)
            return None
        claimed_rule[:] = [claimed.rule_id]
        try:
            plan = plan_run(session, settings, claimed, started)
            # The earliest limit any guardrail sets: max_duration_min, or sooner when a
            # run-seconds budget runs out first.
            deadline = guardrails.deadline(session, plan.rule, settings, started)
        except AdeError as exc:
            return end_run(session, run_id, worker, RunStatus.FAILED, f"cannot run: {exc.message}")
        refused = guardrails.refusal(Admission(session, plan.rule, utcnow(), settings))
        if refused:
            return end_run(session, run_id, worker, RunStatus.SKIPPED, refused)
        return plan, deadline

    prepared = retrying(sessions, claim_and_plan, what=f"run {run_id}: claim")
    if prepared is None:
        return None
    notify = partial(config.notify, run_id, claimed_rule[0], started=started)
    notify(STARTED)
    if not isinstance(prepared, tuple):
        notify(prepared)
        _followed(session_factory, config, run_id, claimed_rule[0], prepared)
        return prepared
    plan, deadline = prepared
    with config.monitor.watch(sessions, run_id, worker, settings, started) as monitor:
        try:
            status = _run_chain(session_factory, config, run_id, worker, plan, deadline, monitor)
        except Exception as exc:  # e.g. the database refused a step's record: end the run clearly
            if isinstance(exc, DatabaseUnavailableError) or is_connection_lost(exc):
                # Not the run's fault: it stays running, and once its lease runs out the
                # recovery sweep resumes it after its last recorded step.
                log.error("run %s: the database stayed away; left for the recovery sweep", run_id)
                notify(INTERRUPTED)
                return None
            log.exception("run %s failed inside the runner", run_id)
            error = f"internal error while running the steps: {exc!r}"
            charge = plan.charge()
            status = durably(
                writes,
                lambda db: end_run(db, run_id, worker, RunStatus.FAILED, error, None, None,
                                   charge),
                f"run {run_id}: outcome",
            )  # fmt: skip
    notify(status or why_stopped(sessions, run_id, monitor))
    limit = plan.rule.guardrails.buffer_limit()
    if config.sender is not None and status is not RunStatus.WAITING:
        if plan.rule.concurrency is not None:  # the run's key is free: its next run starts
            concurrency_keys.release(session_factory, config.sender, plan.rule, run_id)
        elif limit is not None:
            release_buffered(session_factory, config.sender, plan.rule.id, limit)
    _followed(session_factory, config, run_id, plan.rule.id, status)
    return status


def _followed(
    session_factory: SessionFactory,
    config: RunnerConfig,
    run_id: str,
    rule_id: str,
    status: RunStatus | None,
) -> None:
    """Start the rules whose run.finished triggers follow this finished run now, rather than
    at the next sweep (`ade_tasks.triggers.finished_runs`)."""
    if status in FINAL_STATUSES and config.sender is not None:
        emit_after_finish(session_factory, config.sender, run_id, rule_id,
                          automations_disabled=config.settings.disable_automations)  # fmt: skip


def _run_chain(
    session_factory: SessionFactory,
    config: RunnerConfig,
    run_id: str,
    worker: str,
    plan: RunPlan,
    deadline: Deadline,
    monitor: Watch,
) -> RunStatus | None:
    """Run the steps the plan has left, then publish; end the run (or park it for approval)."""
    sessions = autocommit(session_factory)
    writes = durable_writes(session_factory)
    rule, actions = plan.rule, plan.actions
    # The engine's own credentials are masked in every step's output, not only in sessions.
    state = ChainState(masker=Masker(engine_secrets(config.settings)))
    for row in plan.done:
        state.remember(row.step_id, StepOutcome(StepStatus(row.status), row.exit_code,
                                                row.output, row.result, row.error))  # fmt: skip
    gate = guardrails.gate(rule)
    step_run = StepRun(
        base=base_context(session_factory, config, run_id, plan, deadline, monitor),
        rule=rule,
        trigger=plan.trigger,
        find_lane=lambda name: find_lane(sessions, rule.project, name),
    )
    pending: StepRecord | None = None  # the latest step, recorded with the run's outcome
    for index in range(len(plan.done), len(actions)):
        if index == gate and index not in plan.approved and state.failure is None:
            return park_for_approval(sessions, run_id, worker, index, plan, pending)
        # A finished step is durable before the next one starts: a cancel, a timeout or a lost
        # worker during the next one never erases it, and a running run shows it. Only the
        # run's last step waits, to be recorded with the run's outcome in one statement.
        record_step(writes, pending)
        if monitor.given_up():  # no new command for a run cancelled meanwhile
            return None
        action = actions[index]
        step = StepRecord(run_id, index, action.id, action.type, started_at=utcnow())
        if index == len(plan.done) and not may_rerun(sessions, run_id, action, index, plan):
            outcome = StepOutcome(StepStatus.FAILED, error=run_recovery_db.STEP_WORKER_LOST)
        else:
            monitor.step_started(step)
            outcome = run_step(action, index, state, step_run, partial(execute_step, config))
            monitor.step_started(None)
        if monitor.given_up():
            return None
        if outcome.status is StepStatus.WAITING:  # an agent's tool call waits for an answer
            return park_for_tool_call(sessions, run_id, worker, outcome.result["pending"])
        state.remember(action.id, outcome)
        if state.failure is None:
            failure = _failure(action, index, outcome, deadline)
            if failure is not None:
                state.failure = failure
        pending = finished(step, outcome)
        if SHUTDOWN.is_set() and index + 1 < len(actions):
            state.failure = state.failure or (RunStatus.CANCELLED, SHUTDOWN_ERROR)
            break
    # After the steps: the verification command, then (with verify_before_publish) a human.
    index = len(actions)
    unverified = False
    if rule.verification.command and state.failure is None and len(plan.done) <= index:
        record_step(writes, pending)
        pending = _verify_step(config, run_id, state, index, step_run)
        if pending.status is not StepStatus.SUCCEEDED:
            if rule.verification.required:
                state.failure = (RunStatus.FAILED, f"verification failed: {pending.error}")
            unverified = True
    if gate == index and index not in plan.approved and state.failure is None:
        return park_for_approval(sessions, run_id, worker, index, plan, pending)
    status, error = state.failure or (RunStatus.SUCCEEDED, None)
    publish_index = index + (1 if rule.verification.command else 0)
    return _publish_and_end(
        writes, config, run_id, worker, plan, state, step_run,
        (status, error, pending), publish_index, publishes=not unverified, unverified=unverified,
    )  # fmt: skip


def _publish_and_end(
    writes: UnitsOfWork[Statements],
    config: RunnerConfig,
    run_id: str,
    worker: str,
    plan: RunPlan,
    state: ChainState,
    step_run: StepRun,
    outcome: tuple[RunStatus, str | None, StepRecord | None],
    publish_index: int,
    *,
    publishes: bool = True,
    unverified: bool = False,
) -> RunStatus | None:
    """Publish per the disposition (a failed publish fails a succeeded run), then record the
    run's outcome with its review-queue verdict and its last step."""
    status, error, last = outcome
    rule = plan.rule
    disposition = rule.outputs.disposition is not Disposition.EVIDENCE_ONLY
    if disposition and publishes and not SHUTDOWN.is_set():
        record_step(writes, last)
        last = _publish_step(config, run_id, plan, state, status, publish_index, step_run)
        if last.status is StepStatus.FAILED and status is RunStatus.SUCCEEDED:
            status, error = RunStatus.FAILED, f"step 'publish' failed: {last.error}"
    verdict = _review(rule, status, state, unverified)
    charge = plan.charge()
    return durably(
        writes,
        lambda db: end_run(db, run_id, worker, status, error, last, verdict, charge),
        f"run {run_id}: outcome",
    )


def _failure(
    action: Action, index: int, outcome: StepOutcome, deadline: Deadline
) -> tuple[RunStatus, str] | None:
    """What a step's outcome means for the run (None: carry on)."""
    if outcome.status in (StepStatus.SUCCEEDED, StepStatus.SKIPPED) or action.continue_on_failure:
        return None
    if SHUTDOWN.is_set():
        return RunStatus.CANCELLED, SHUTDOWN_ERROR
    where = f"step {action.id!r} (#{index + 1})"
    if outcome.status is StepStatus.TIMED_OUT:
        if time.monotonic() >= deadline.at:
            return RunStatus.TIMED_OUT, f"{where} was stopped: {deadline.reason} was reached"
        return RunStatus.TIMED_OUT, f"{where} timed out: {outcome.error}"
    return RunStatus.FAILED, f"{where} failed: {outcome.error}"


def _publish_step(
    config: RunnerConfig,
    run_id: str,
    plan: RunPlan,
    state: ChainState,
    status: RunStatus,
    index: int,
    step_run: StepRun,
) -> StepRecord:
    """Publish the run's result per its disposition, as one more step named `publish`."""
    step = StepRecord(run_id, index, "publish", "publish", started_at=utcnow())
    context = replace(step_run.base, step_index=index, step_id="publish", lane=state.lane,
                      masker=state.masker)  # fmt: skip
    try:
        outcome = publish(plan.rule, status, state, context, config.settings)
    except Exception as exc:  # publishing must not leave the run running
        log.exception("publishing run %s failed", run_id)
        outcome = StepOutcome(StepStatus.FAILED, error=f"internal error while publishing: {exc!r}")
    return replace(
        step,
        status=outcome.status,
        finished_at=utcnow(),
        output=state.masker.mask(outcome.output),
        result=state.masker.mask_value(outcome.result),
        error=state.masker.mask(outcome.error) if outcome.error else None,
    )


def _verify_step(
    config: RunnerConfig, run_id: str, state: ChainState, index: int, step_run: StepRun
) -> StepRecord:
    """Run the rule's verification command (in the run's lane, if it has one) as step
    `verify`; its outcome decides whether the run's change is verified."""
    command = step_run.rule.verification.command
    assert command is not None
    action = RunCommandAction(type="run-command", id="verify", command=command)
    step = StepRecord(run_id, index, "verify", "verification", started_at=utcnow())
    outcome = run_step(action, index, state, step_run, partial(execute_step, config))
    state.remember("verify", outcome)
    return finished(step, outcome)


def _review(
    rule: Rule, status: RunStatus, state: ChainState, unverified: bool
) -> runs_db.RunVerdict:
    verification = rule.verification
    # A required verification without a command is owed by a run that succeeded; a run that
    # failed before it is a failure to look at first.
    owed = verification.required and not verification.command and status is RunStatus.SUCCEEDED
    outcome = review(
        status,
        profile=rule.review_profile,
        context_sources=state.ran,
        threshold=rule.review_threshold,
        findings=len(state.findings),
        verification_pending=unverified or owed,
        deterministic=not rule.agentic,
        review_required=rule.review_required,
    )
    return runs_db.RunVerdict(
        outcome.queue_status, outcome.confidence, state.findings[:500] or None
    )
