"""Execute one run: claim it, run its steps in order under a heartbeat lease, record the outcome.

No database session is held while a step runs, and every state change is one statement that
commits on its own (see `ade_tasks.db.engine.autocommit`): the claim, a step's outcome, the
run's outcome together with its last step's, and the run's seconds added to its billing code's
usage. A step that runs longer than `ANNOUNCE_AFTER` is shown as running by the process's
monitor thread; a one-step run of a short command thus costs three statements from claim to
finish. The semantics of the steps themselves live in `ade_workers.chain`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from ade_tasks.agents.protected import engine_secrets
from ade_tasks.clock import utcnow
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import lanes as lanes_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import usage as usage_db
from ade_tasks.db.engine import SessionFactory, autocommit
from ade_tasks.db.lanes import LaneRef
from ade_tasks.db.retry import is_connection_lost, retrying
from ade_tasks.db.runs import StepRecord
from ade_tasks.db.schema import RunStepRow
from ade_tasks.dispatch import TaskSender, release_buffered
from ade_tasks.errors import AdeError, DatabaseUnavailableError
from ade_tasks.guardrails import registry as guardrails
from ade_tasks.guardrails.base import Admission, Deadline
from ade_tasks.review import review
from ade_tasks.rules.outputs import Disposition
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import RunCommandAction
from ade_tasks.secrets import Masker
from ade_tasks.settings import Settings
from ade_tasks.states import RunStatus, StepStatus
from ade_workers.actions.base import ActionExecutor, StepContext, StepOutcome
from ade_workers.actions.registry import registry, unknown_action
from ade_workers.agents.agent_run import park_for_tool
from ade_workers.chain import ChainState, StepRun, run_step, template_context
from ade_workers.publish import publish

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Set by an embedded host (`ade-tasks dev`) on Ctrl-C: running commands are killed and their
#: runs end `cancelled`, and nothing those commands started is left behind.
SHUTDOWN = threading.Event()
SHUTDOWN_ERROR = "the worker shut down while this run was executing; trigger the rule again"
#: A step still running after this many seconds appears in the run history as `running`.
ANNOUNCE_AFTER = 0.5
#: How often a running run's row is read for a cancel: a cancelled step stops within about
#: this long plus the process's own stop check, instead of at the next lease renewal (up to
#: `heartbeat_seconds`). The database is the signal because it is the record: it reaches the
#: right worker process on any broker and pool, and a worker that was briefly cut off from it
#: still sees the cancel once it is back, where a broadcast sent meanwhile would be lost.
CANCEL_CHECK = 0.5
#: How often a finished step's record or the run's outcome is tried through a database outage
#: (with `ade_tasks.db.retry`'s backoff: about 20 seconds in all).
FINISH_ATTEMPTS = 22


class RunMonitor:
    """One thread per worker process beside the runs it executes.

    Every `TICK` seconds it renews the leases that are due (each run every `heartbeat_seconds`),
    looks for a cancel (each run every `CANCEL_CHECK`) and shows steps that have run longer than
    `ANNOUNCE_AFTER` as running. A run that was cancelled gets `cancelled` and `lost` set; one
    whose lease can no longer be renewed (the recovery sweep ended it) gets `lost` set.
    One shared thread instead of one per run keeps thread start-up off the run path.
    """

    TICK = 0.25

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, Watch] = {}
        self._pid: int | None = None

    def watch(
        self,
        sessions: SessionFactory,
        run_id: str,
        worker: str,
        settings: Settings,
        leased_at: float | None = None,
    ) -> Watch:
        """Start watching a run (leased at monotonic time `leased_at`, default now); use the
        result as a context manager around its steps."""
        leased_at = time.monotonic() if leased_at is None else leased_at
        watch = Watch(self, sessions, run_id, worker, settings, leased_at)
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked pool process
                self._runs = {}
                self._pid = os.getpid()
                threading.Thread(target=self._loop, name="ade-run-monitor", daemon=True).start()
            self._runs[run_id] = watch
        return watch

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def _loop(self) -> None:
        while True:
            time.sleep(self.TICK)
            with self._lock:
                watches = list(self._runs.values())
            now = time.monotonic()
            for watch in watches:
                watch.tend(now)


class Watch:
    """One watched run: its lease timing, the step to announce, and whether it was lost
    (cancelled, or taken over) and why."""

    def __init__(
        self,
        monitor: RunMonitor,
        sessions: SessionFactory,
        run_id: str,
        worker: str,
        settings: Settings,
        leased_at: float,
    ) -> None:
        self._monitor = monitor
        self._sessions = sessions
        self.run_id = run_id
        self._worker = worker
        self._lease = timedelta(seconds=settings.lease_seconds)
        self._interval = settings.heartbeat_seconds
        self._next_beat = time.monotonic() + self._interval
        self._next_cancel_check = time.monotonic() + CANCEL_CHECK
        # Until when the lease surely holds (measured from before the statement that took or
        # renewed it), less the time the step's processes need to stop: past this without a
        # renewal, another worker may take the run over, so this one stops first.
        slack = max(0.0, settings.lease_seconds - settings.heartbeat_seconds) / 2
        self._fence_margin = min(settings.kill_grace_seconds + 0.5, slack)
        self._held_until = leased_at + settings.lease_seconds
        self._pending: tuple[StepRecord, float] | None = None
        self.lost = threading.Event()
        self.cancelled = threading.Event()  # set together with `lost`: stopped on purpose

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._monitor.forget(self.run_id)

    def step_started(self, step: StepRecord | None) -> None:
        """Announce `step` if it is still running after ANNOUNCE_AFTER (None: no step runs)."""
        self._pending = None if step is None else (step, time.monotonic() + ANNOUNCE_AFTER)

    def tend(self, now: float) -> None:
        """Called by the monitor thread: announce a long step, renew the lease when due, and
        stop the run when its lease can no longer be confirmed (a partition from the database):
        the run is then resumed elsewhere, never run by two workers at once."""
        pending = self._pending
        if pending is not None and now >= pending[1]:
            self._write(runs_db.announce_step, pending[0])
            if self._pending is pending:
                self._pending = None
        if self.lost.is_set():
            return
        if now >= self._next_cancel_check:
            self._next_cancel_check = now + CANCEL_CHECK
            if self._check_cancelled():
                return
        if now >= self._next_beat:
            self._next_beat = now + self._interval
            until = utcnow() + self._lease
            renewed = self._write(runs_db.renew_lease, self.run_id, self._worker, until)
            if renewed is False:
                # Cancelled since the last check, or ended by the recovery sweep.
                if not self._check_cancelled():
                    log.warning("run %s is no longer ours (recovered elsewhere)", self.run_id)
                    self.lost.set()
                return
            if renewed:
                self._held_until = now + self._lease.total_seconds()
        if self.fenced(max(now, time.monotonic())):  # the renewal may have blocked
            log.error(
                "run %s: its lease could not be renewed (the database is unreachable); stopping "
                "its step before the lease runs out, so the recovery sweep can resume it",
                self.run_id,
            )
            self.lost.set()

    def _check_cancelled(self) -> bool:
        """Stop the run if it was cancelled; True when it was."""
        if self._write(runs_db.is_cancelled, self.run_id):
            log.info("run %s was cancelled; stopping its step", self.run_id)
            self.cancelled.set()
            self.lost.set()
            return True
        return False

    def fenced(self, now: float | None = None) -> bool:
        """Has the lease gone unconfirmed for so long that the run must stop now? Asked by the
        run's own thread too, so a renewal stuck on an unreachable database cannot delay it."""
        now = time.monotonic() if now is None else now
        return now >= self._held_until - self._fence_margin

    def _write(self, write: Callable[..., Any], *args: Any) -> Any:
        """`write` in a transaction of its own; None when the database did not answer."""
        try:
            with self._sessions.begin() as session:
                return write(session, *args)
        except Exception:  # a DB blip must not end the run; the next tick retries
            log.exception("run %s: %s failed", self.run_id, write.__name__)
            return None


#: A `RunNotice.status` besides the run statuses: the run started on this worker.
STARTED = "started"
#: ... or this worker stopped it without an outcome (lease lost, database away): the recovery
#: sweep decides what comes of it.
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class RunNotice:
    """A run starting or ending on this worker, for a console that shows runs as they go."""

    run_id: str
    rule_id: str
    status: str  # STARTED, a final or `waiting` RunStatus, or INTERRUPTED
    seconds: float  # since this worker took the run


@dataclass(frozen=True)
class RunnerConfig:
    """What the runner needs: settings, action executors, the worker's environment, a monitor,
    and who hears of runs starting and ending (`ade-tasks dev` prints them)."""

    settings: Settings
    executors: Mapping[str, ActionExecutor[Any]]
    base_env: Mapping[str, str]
    monitor: RunMonitor = field(default_factory=RunMonitor)
    sender: TaskSender | None = None  # releases runs buffered by an overlap policy
    on_run: Callable[[RunNotice], None] | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        sender: TaskSender | None = None,
        on_run: Callable[[RunNotice], None] | None = None,
    ) -> RunnerConfig:
        return cls(settings, registry(), dict(os.environ), sender=sender, on_run=on_run)

    def notify(self, run_id: str, rule_id: str, status: str, started: float) -> None:
        """Tell `on_run`; a failing listener never touches the run."""
        if self.on_run is None:
            return
        try:
            self.on_run(RunNotice(run_id, rule_id, status, time.monotonic() - started))
        except Exception:
            log.exception("run %s: the run listener failed", run_id)


@dataclass(frozen=True)
class _Plan:
    """A claimed run that can start: its rule, trigger, where its actions run, and what an
    earlier attempt of it already did (a run resumed after an approval)."""

    rule: Rule
    actions: list[Any]
    trigger: dict[str, Any]
    project_root: Path
    done: list[RunStepRow]
    approved: frozenset[int]
    started: float  # time.monotonic() when this worker took the run
    interruption: runs_db.Interruption | None = None  # what lost workers left to decide

    def charge(self) -> usage_db.Charge:
        """The run-seconds this attempt charges to the rule's billing code, as it ends."""
        spent = round(time.monotonic() - self.started, 3)
        return usage_db.Charge(self.rule.billing_code, usage_db.day_of(utcnow()), spent)


def execute_run(
    session_factory: SessionFactory, config: RunnerConfig, run_id: str, worker: str
) -> RunStatus | None:
    """Run a queued run to its end; None when it was not ours to run (claimed or finished), or
    stopped without an outcome of its own (cancelled, lease lost)."""
    settings = config.settings
    sessions = autocommit(session_factory)
    started = time.monotonic()
    lease_until = utcnow() + timedelta(seconds=settings.lease_seconds)
    claimed_rule: list[str] = []  # the rule of the run, once the claim held

    def claim_and_plan(session: Any) -> tuple[_Plan, Deadline] | RunStatus | None:
        # One unit of work, so one connection checkout; repeating it after a lost connection
        # is safe because a claim repeated by its own worker holds (`runs_db.claim_run`).
        claimed = runs_db.claim_run(session, run_id, worker, lease_until)
        if claimed is None:
            log.info("run %s is already claimed or finished; nothing to do", run_id)
            return None
        claimed_rule[:] = [claimed.rule_id]
        try:
            plan = _plan(session, config, claimed, started)
            # The earliest limit any guardrail sets: max_duration_min, or sooner when a
            # run-seconds budget runs out first.
            deadline = guardrails.deadline(session, plan.rule, settings, started)
        except AdeError as exc:
            return _end(session, run_id, worker, RunStatus.FAILED, f"cannot run: {exc.message}")
        refused = guardrails.refusal(Admission(session, plan.rule, utcnow(), settings))
        if refused:
            return _end(session, run_id, worker, RunStatus.SKIPPED, refused)
        return plan, deadline

    prepared = retrying(sessions, claim_and_plan, what=f"run {run_id}: claim")
    if prepared is None:
        return None
    notify = partial(config.notify, run_id, claimed_rule[0], started=started)
    notify(STARTED)
    if not isinstance(prepared, tuple):
        notify(prepared)
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
            status = _durably(
                sessions,
                lambda session: _end(session, run_id, worker, RunStatus.FAILED, error, None,
                                     None, charge),
                f"run {run_id}: outcome",
            )  # fmt: skip
    notify(status or _why_stopped(sessions, run_id, monitor))
    limit = plan.rule.guardrails.buffer_limit()
    if limit is not None and config.sender is not None and status is not RunStatus.WAITING:
        release_buffered(session_factory, config.sender, plan.rule.id, limit)
    return status


def _plan(session: Any, config: RunnerConfig, claimed: runs_db.ClaimedRun, started: float) -> _Plan:
    if claimed.rule_hash is None:
        raise rules_db.rule_not_found(claimed.rule_id)
    rule = rules_db.cached_rule(claimed.rule_hash)
    if rule is None or claimed.rule_trust == rules_db.UNTRUSTED:
        snapshot = rules_db.rule_snapshot(session, claimed.rule_id)
        rule = snapshot.rule
        if snapshot.untrusted_reason():
            raise AdeError(snapshot.untrusted_reason())
    done: list[RunStepRow] = []
    approved: frozenset[int] = frozenset()
    interruption = None
    if claimed.attempt > 1:  # resumed (after an approval or a lost worker): keep what was done
        done = [s for s in runs_db.list_steps(session, claimed.id) if s.status != "running"]
        approved = approvals_db.approved_steps(session, claimed.id)
        interruption = runs_db.interruption_of(session, claimed.id)
    return _Plan(
        rule=rule,
        actions=list(rule.execution.actions),
        trigger=dict(claimed.trigger),
        project_root=config.settings.project_root(rule.project),
        done=done,
        approved=approved,
        started=started,
        interruption=interruption,
    )


def _run_chain(
    session_factory: SessionFactory,
    config: RunnerConfig,
    run_id: str,
    worker: str,
    plan: _Plan,
    deadline: Deadline,
    monitor: Watch,
) -> RunStatus | None:
    """Run the steps the plan has left, then publish; end the run (or park it for approval)."""
    sessions = autocommit(session_factory)
    rule, actions = plan.rule, plan.actions
    # The engine's own credentials are masked in every step's output, not only in sessions.
    state = ChainState(masker=Masker(engine_secrets(config.settings)))
    for row in plan.done:
        state.remember(row.step_id, StepOutcome(StepStatus(row.status), row.exit_code,
                                                row.output, row.result, row.error))  # fmt: skip
    gate = guardrails.gate(rule)
    step_run = StepRun(
        base=_base_context(session_factory, config, run_id, plan, deadline, monitor),
        rule=rule,
        trigger=plan.trigger,
        find_lane=lambda name: _find_lane(sessions, rule.project, name),
    )
    pending: StepRecord | None = None  # the latest step, recorded with the run's outcome
    for index in range(len(plan.done), len(actions)):
        if index == gate and index not in plan.approved and state.failure is None:
            return _park(sessions, run_id, worker, index, plan, pending)
        # A finished step is durable before the next one starts: a cancel, a timeout or a lost
        # worker during the next one never erases it, and a running run shows it. Only the
        # run's last step waits, to be recorded with the run's outcome in one statement.
        _record(sessions, pending)
        if _given_up(monitor, run_id):  # no new command for a run cancelled meanwhile
            return None
        action = actions[index]
        step = StepRecord(run_id, index, action.id, action.type, started_at=utcnow())
        if index == len(plan.done) and not _may_rerun(sessions, run_id, action, index, plan):
            outcome = StepOutcome(StepStatus.FAILED, error=runs_db.STEP_WORKER_LOST)
        else:
            monitor.step_started(step)
            outcome = run_step(action, index, state, step_run, partial(_execute_step, config))
            monitor.step_started(None)
        if _given_up(monitor, run_id):
            return None
        if outcome.status is StepStatus.WAITING:  # an agent's tool call waits for an answer
            return _park_for_tool(sessions, run_id, worker, outcome.result["pending"])
        state.remember(action.id, outcome)
        if state.failure is None:
            failure = _failure(action, index, outcome, deadline)
            if failure is not None:
                state.failure = failure
        pending = replace(
            step,
            status=outcome.status,
            finished_at=utcnow(),
            exit_code=outcome.exit_code,
            output=outcome.output,
            result=outcome.result,
            error=outcome.error,
        )
        if SHUTDOWN.is_set() and index + 1 < len(actions):
            state.failure = state.failure or (RunStatus.CANCELLED, SHUTDOWN_ERROR)
            break
    # After the steps: the verification command, then (with verify_before_publish) a human.
    index = len(actions)
    unverified = False
    if rule.verification.command and state.failure is None and len(plan.done) <= index:
        _record(sessions, pending)
        pending = _verify_step(config, run_id, state, index, step_run)
        if pending.status is not StepStatus.SUCCEEDED:
            if rule.verification.required:
                state.failure = (RunStatus.FAILED, f"verification failed: {pending.error}")
            unverified = True
    if gate == index and index not in plan.approved and state.failure is None:
        return _park(sessions, run_id, worker, index, plan, pending)
    status, error = state.failure or (RunStatus.SUCCEEDED, None)
    publish_index = index + (1 if rule.verification.command else 0)
    return _publish_and_end(
        sessions, config, run_id, worker, plan, state, step_run,
        (status, error, pending), publish_index, publishes=not unverified, unverified=unverified,
    )  # fmt: skip


def _publish_and_end(
    sessions: SessionFactory,
    config: RunnerConfig,
    run_id: str,
    worker: str,
    plan: _Plan,
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
        _record(sessions, last)
        last = _publish_step(config, run_id, plan, state, status, publish_index, step_run)
        if last.status is StepStatus.FAILED and status is RunStatus.SUCCEEDED:
            status, error = RunStatus.FAILED, f"step 'publish' failed: {last.error}"
    verdict = _review(rule, status, state, unverified)
    charge = plan.charge()
    return _durably(
        sessions,
        lambda session: _end(session, run_id, worker, status, error, last, verdict, charge),
        f"run {run_id}: outcome",
    )


def _may_rerun(sessions: SessionFactory, run_id: str, action: Any, index: int, plan: _Plan) -> bool:
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
        runs_db.append_event(
            session, run_id, runs_db.INTERRUPTED_EVENT, {"index": index, "rerun": rerun}
        )
    log.warning(
        "run %s: step %d was interrupted by a lost worker; %s",
        run_id, index + 1, "running it again" if rerun else "recording it failed",
    )  # fmt: skip
    return rerun


def _why_stopped(sessions: SessionFactory, run_id: str, monitor: Watch) -> str:
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


def _given_up(monitor: Watch, run_id: str) -> bool:
    """Must the run stop here without an outcome of its own? Yes when it was cancelled (its row
    says so already) or when its lease was lost (the recovery sweep decides what comes of it)."""
    if monitor.cancelled.is_set():  # the monitor said so when it saw the cancel
        return True
    if monitor.lost.is_set() or monitor.fenced():
        log.warning("run %s lost its lease; its outcome is decided elsewhere", run_id)
        return True
    return False


def _park_for_tool(
    sessions: SessionFactory, run_id: str, worker: str, pending: dict[str, Any]
) -> RunStatus | None:
    if not park_for_tool(sessions, run_id, worker, pending):
        return None
    log.info("run %s is waiting for an answer on tool call %s", run_id, pending["tool"])
    return RunStatus.WAITING


def _record(sessions: SessionFactory, step: StepRecord | None) -> None:
    """Record a finished step that is not the run's last (that one goes with the outcome)."""
    if step is not None:
        _durably(sessions, partial(runs_db.record_step, step=step), f"run {step.run_id}: step")


def _durably(sessions: SessionFactory, write: Callable[[Any], T], what: str) -> T:
    """A write of what a step or run achieved, retried through a database outage of up to
    about 20 seconds: a step that finished must not be lost to a bookkeeping blip after it."""
    return retrying(sessions, write, what=what, attempts=FINISH_ATTEMPTS)


def _base_context(
    session_factory: SessionFactory,
    config: RunnerConfig,
    run_id: str,
    plan: _Plan,
    deadline: Deadline,
    monitor: Watch,
) -> StepContext:
    def should_stop() -> bool:
        return monitor.lost.is_set() or monitor.fenced() or SHUTDOWN.is_set()

    return StepContext(
        run_id=run_id,
        rule=plan.rule,
        trigger=plan.trigger,
        step_index=0,
        project_root=plan.project_root,
        env_allowlist=config.settings.command_env_allowlist,
        base_env=config.base_env,
        time_left=lambda: deadline.at - time.monotonic(),
        should_stop=should_stop,
        kill_grace=config.settings.kill_grace_seconds,
        sessions=session_factory,
        settings=config.settings,
        sender=config.sender,
        template=template_context(plan.rule, plan.trigger, ChainState()),
    )


def _find_lane(sessions: SessionFactory, project: str, name: str) -> LaneRef | None:
    with sessions.begin() as session:
        row = lanes_db.active_lane(session, project, name)
    return None if row is None else lanes_db.lane_ref(row)


def _park(
    sessions: SessionFactory,
    run_id: str,
    worker: str,
    index: int,
    plan: _Plan,
    pending: StepRecord | None,
) -> RunStatus | None:
    """Stop the run in `waiting` until an operator approves or rejects it."""
    rule = plan.rule
    what = (
        "publishing its result"
        if index == len(plan.actions)
        else f"step #{index + 1}, its first side-effecting step"
    )
    reason = (
        f"rule {rule.id!r} requires a human to approve before {what}; approve or reject it "
        f"with `ade-tasks runs approve {run_id}` / `ade-tasks runs reject {run_id}`"
    )
    with sessions.begin() as session:
        if pending is not None:
            runs_db.record_step(session, pending)
        if not approvals_db.wait_for_approval(session, run_id, worker, index, reason):
            return None
    log.info("run %s is waiting for approval before step %d", run_id, index)
    return RunStatus.WAITING


def _failure(
    action: Any, index: int, outcome: StepOutcome, deadline: Deadline
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


def _execute_step(config: RunnerConfig, action: Any, context: StepContext) -> StepOutcome:
    executor = config.executors.get(action.type)
    if executor is None:
        return StepOutcome(StepStatus.FAILED, error=unknown_action(action.type, config.executors))
    try:
        return executor(action, context)
    except Exception as exc:  # an executor bug must end the step, not leave it running
        log.exception("step %s of run %s crashed", context.step_index, context.run_id)
        return StepOutcome(StepStatus.FAILED, error=f"internal error in {action.type}: {exc!r}")


def _publish_step(
    config: RunnerConfig,
    run_id: str,
    plan: _Plan,
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
    outcome = run_step(action, index, state, step_run, partial(_execute_step, config))
    state.remember("verify", outcome)
    return replace(
        step,
        status=outcome.status,
        finished_at=utcnow(),
        exit_code=outcome.exit_code,
        output=outcome.output,
        result=outcome.result,
        error=outcome.error,
    )


def _review(
    rule: Rule, status: RunStatus, state: ChainState, unverified: bool
) -> runs_db.RunVerdict:
    verification = rule.verification
    outcome = review(
        status,
        profile=rule.review_profile,
        context_sources=state.ran,
        threshold=rule.review_threshold,
        findings=len(state.findings),
        verification_pending=unverified or (verification.required and not verification.command),
        deterministic=not rule.agentic,
        review_required=rule.review_required,
    )
    return runs_db.RunVerdict(
        outcome.queue_status, outcome.confidence, state.findings[:500] or None
    )


def _end(
    session: Any,
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
