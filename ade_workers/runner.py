"""Execute one run: claim it, run its steps in order under a heartbeat lease, record the outcome.

No database session is held while a step runs, and every state change is one statement that
commits on its own (see `ade_tasks.db.engine.autocommit`): the claim, a step's outcome, the
run's outcome together with its last step's. A step that runs longer than `ANNOUNCE_AFTER`
is shown as running by the process's monitor thread; a one-step run of a short command thus
costs two statements from claim to finish.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from ade_tasks.db import rules as rules_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory, autocommit
from ade_tasks.db.runs import StepRecord
from ade_tasks.db.schema import RunStatus, StepStatus, utcnow
from ade_tasks.dispatch import TaskSender, release_buffered, unrunnable_reason
from ade_tasks.errors import AdeError
from ade_tasks.rules.models import Rule, RunCommandAction
from ade_tasks.settings import Settings
from ade_workers.actions import ActionExecutor, StepContext, StepOutcome, registry

log = logging.getLogger(__name__)

#: Set by an embedded host (`ade-tasks dev`) on Ctrl-C: running commands are killed and their
#: runs end `cancelled` instead of leaving orphaned process groups behind.
SHUTDOWN = threading.Event()
SHUTDOWN_ERROR = "the worker shut down while this run was executing; trigger the rule again"
#: A step still running after this many seconds appears in the run history as `running`.
ANNOUNCE_AFTER = 0.5


class RunMonitor:
    """One thread per worker process beside the runs it executes.

    Every `TICK` seconds it renews the leases that are due (each run every `heartbeat_seconds`)
    and shows steps that have run longer than `ANNOUNCE_AFTER` as running. A run whose lease can
    no longer be renewed (the recovery sweep ended it, or it was cancelled) gets `lost` set.
    One shared thread instead of one per run keeps thread start-up off the run path.
    """

    TICK = 0.25

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, Watch] = {}
        self._pid: int | None = None

    def watch(
        self, sessions: SessionFactory, run_id: str, worker: str, settings: Settings
    ) -> Watch:
        """Start watching a run; use the result as a context manager around its steps."""
        watch = Watch(self, sessions, run_id, worker, settings)
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
    """One watched run: its lease timing, the step to announce, and whether it was lost."""

    def __init__(
        self,
        monitor: RunMonitor,
        sessions: SessionFactory,
        run_id: str,
        worker: str,
        settings: Settings,
    ) -> None:
        self._monitor = monitor
        self._sessions = sessions
        self.run_id = run_id
        self._worker = worker
        self._lease = timedelta(seconds=settings.lease_seconds)
        self._interval = settings.heartbeat_seconds
        self._next_beat = time.monotonic() + self._interval
        self._pending: tuple[StepRecord, float] | None = None
        self.lost = threading.Event()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._monitor.forget(self.run_id)

    def step_started(self, step: StepRecord | None) -> None:
        """Announce `step` if it is still running after ANNOUNCE_AFTER (None: no step runs)."""
        self._pending = None if step is None else (step, time.monotonic() + ANNOUNCE_AFTER)

    def tend(self, now: float) -> None:
        """Called by the monitor thread: announce a long step, renew the lease when due."""
        pending = self._pending
        if pending is not None and now >= pending[1]:
            self._write(runs_db.announce_step, pending[0])
            if self._pending is pending:
                self._pending = None
        if now >= self._next_beat and not self.lost.is_set():
            self._next_beat = now + self._interval
            until = utcnow() + self._lease
            if not self._write(runs_db.renew_lease, self.run_id, self._worker, until):
                log.warning("run %s is no longer ours (cancelled or recovered)", self.run_id)
                self.lost.set()

    def _write(self, write: Callable[..., Any], *args: Any) -> Any:
        try:
            with self._sessions.begin() as session:
                return write(session, *args)
        except Exception:  # a DB blip must not end the run; the next tick retries
            log.exception("run %s: %s failed", self.run_id, write.__name__)
            return True


@dataclass(frozen=True)
class RunnerConfig:
    """What the runner needs: settings, action executors, the worker's environment, a monitor."""

    settings: Settings
    executors: Mapping[str, ActionExecutor]
    base_env: Mapping[str, str]
    monitor: RunMonitor = field(default_factory=RunMonitor)
    sender: TaskSender | None = None  # releases runs buffered by an overlap policy

    @classmethod
    def from_settings(cls, settings: Settings, sender: TaskSender | None = None) -> RunnerConfig:
        return cls(settings, registry(), dict(os.environ), sender=sender)


@dataclass(frozen=True)
class _Plan:
    """A claimed run that can start: its rule, trigger and where its actions run."""

    rule: Rule
    actions: list[RunCommandAction]
    trigger: dict[str, Any]
    project_root: Path


def execute_run(
    session_factory: SessionFactory, config: RunnerConfig, run_id: str, worker: str
) -> RunStatus | None:
    """Run a queued run to its end; None when it was not ours to run (claimed or finished)."""
    settings = config.settings
    sessions = autocommit(session_factory)
    with sessions.begin() as session:
        lease_until = utcnow() + timedelta(seconds=settings.lease_seconds)
        claimed = runs_db.claim_run(session, run_id, worker, lease_until)
        if claimed is None:
            log.info("run %s is already claimed or finished; nothing to do", run_id)
            return None
        try:
            plan = _plan(session, config, claimed)
        except AdeError as exc:
            return _end(session, run_id, worker, RunStatus.FAILED, f"cannot run: {exc.message}")

    deadline = time.monotonic() + plan.rule.guardrails.max_duration_min * 60
    with config.monitor.watch(sessions, run_id, worker, settings) as monitor:
        try:
            status = _run_steps(sessions, config, run_id, worker, plan, deadline, monitor)
        except Exception as exc:  # e.g. the database refused a step's record: end the run clearly
            log.exception("run %s failed inside the runner", run_id)
            error = f"internal error while running the steps: {exc!r}"
            with sessions.begin() as session:
                status = _end(session, run_id, worker, RunStatus.FAILED, error)
    limit = plan.rule.guardrails.buffer_limit()
    if limit is not None and config.sender is not None:
        release_buffered(session_factory, config.sender, plan.rule.id, limit)
    return status


def _plan(session: Any, config: RunnerConfig, claimed: runs_db.ClaimedRun) -> _Plan:
    if claimed.rule_hash is None:
        raise rules_db.rule_not_found(claimed.rule_id)
    rule = rules_db.cached_rule(claimed.rule_hash)
    if rule is None:
        rule = rules_db.rule_snapshot(session, claimed.rule_id).rule
    unrunnable = unrunnable_reason(rule)  # the rule may have changed since its dispatch
    if unrunnable:
        raise AdeError(unrunnable)
    assert rule.execution.kind == "built-in"  # the only runnable kind today
    return _Plan(
        rule=rule,
        actions=list(rule.execution.actions),
        trigger=dict(claimed.trigger),
        project_root=config.settings.project_root(rule.project),
    )


def _run_steps(
    sessions: SessionFactory,
    config: RunnerConfig,
    run_id: str,
    worker: str,
    plan: _Plan,
    deadline: float,
    monitor: Watch,
) -> RunStatus | None:
    def should_stop() -> bool:
        return monitor.lost.is_set() or SHUTDOWN.is_set()

    for index, action in enumerate(plan.actions):
        step = StepRecord(run_id, index, action.id, action.type, started_at=utcnow())
        monitor.step_started(step)
        context = StepContext(
            run_id=run_id,
            rule=plan.rule,
            trigger=plan.trigger,
            step_index=index,
            project_root=plan.project_root,
            env_allowlist=config.settings.command_env_allowlist,
            base_env=config.base_env,
            time_left=lambda: deadline - time.monotonic(),
            should_stop=should_stop,
            kill_grace=config.settings.kill_grace_seconds,
        )
        outcome = _execute_step(config, action, context)
        monitor.step_started(None)
        if monitor.lost.is_set():
            log.warning("run %s lost its lease; its outcome is decided elsewhere", run_id)
            return None
        finished = replace(
            step,
            status=outcome.status,
            finished_at=utcnow(),
            exit_code=outcome.exit_code,
            output=outcome.output,
            result=outcome.result,
            error=outcome.error,
        )
        status, error = _verdict(action, index, outcome)
        is_last = index + 1 == len(plan.actions)
        if status is RunStatus.SUCCEEDED and SHUTDOWN.is_set() and not is_last:
            status, error = RunStatus.CANCELLED, SHUTDOWN_ERROR
        with sessions.begin() as session:
            if is_last or status is not RunStatus.SUCCEEDED:
                return _end(session, run_id, worker, status, error, finished)
            runs_db.record_step(session, finished)
    raise AssertionError("a built-in rule has at least one action")


def _verdict(action: Any, index: int, outcome: StepOutcome) -> tuple[RunStatus, str | None]:
    """What a step's outcome means for the run (SUCCEEDED: carry on)."""
    if outcome.status is StepStatus.SUCCEEDED or action.continue_on_failure:
        return RunStatus.SUCCEEDED, None
    if SHUTDOWN.is_set():
        return RunStatus.CANCELLED, SHUTDOWN_ERROR
    where = f"step {action.id!r} (#{index + 1})"
    if outcome.status is StepStatus.TIMED_OUT:
        return RunStatus.TIMED_OUT, f"{where} timed out: {outcome.error}"
    return RunStatus.FAILED, f"{where} failed: {outcome.error}"


def _execute_step(config: RunnerConfig, action: Any, context: StepContext) -> StepOutcome:
    executor = config.executors.get(action.type)
    if executor is None:
        return StepOutcome(
            StepStatus.FAILED, error=f"action type {action.type!r} is not available on this worker"
        )
    try:
        return executor(action, context)
    except Exception as exc:  # an executor bug must end the step, not leave it running
        log.exception("step %s of run %s crashed", context.step_index, context.run_id)
        return StepOutcome(StepStatus.FAILED, error=f"internal error in {action.type}: {exc!r}")


def _end(
    session: Any,
    run_id: str,
    worker: str,
    status: RunStatus,
    error: str | None,
    last_step: StepRecord | None = None,
) -> RunStatus | None:
    """Finish the run (and record its last step); None if it was no longer ours."""
    if not runs_db.finish_run(session, run_id, worker, status, error, last_step):
        return None
    log.info("run %s finished: %s%s", run_id, status, f" ({error})" if error else "")
    return status
