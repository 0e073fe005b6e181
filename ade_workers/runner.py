"""Execute one run: claim it, run its steps in order under a heartbeat lease, record the outcome.

No database session is held while a step runs: each state change is its own short transaction.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from ade_tasks.db import rules as rules_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunStatus, StepStatus, utcnow
from ade_tasks.errors import AdeError
from ade_tasks.rules.models import Rule
from ade_tasks.settings import Settings
from ade_workers.actions import ActionExecutor, StepContext, StepOutcome, registry

log = logging.getLogger(__name__)

#: Set by an embedded host (`ade-tasks dev`) on Ctrl-C: running commands are killed and their
#: runs end `cancelled` instead of leaving orphaned process groups behind.
SHUTDOWN = threading.Event()
SHUTDOWN_ERROR = "the worker shut down while this run was executing; trigger the rule again"


@dataclass(frozen=True)
class RunnerConfig:
    """What the runner needs from the settings."""

    settings: Settings
    executors: Mapping[str, ActionExecutor]
    base_env: Mapping[str, str]

    @classmethod
    def from_settings(cls, settings: Settings) -> RunnerConfig:
        return cls(settings, registry(), dict(os.environ))


class Lease:
    """Renews the run's lease in the background; notices when the run stops being ours."""

    def __init__(self, session_factory: SessionFactory, run_id: str, worker: str, cfg: Settings):
        self._session_factory = session_factory
        self._run_id = run_id
        self._worker = worker
        self._length = timedelta(seconds=cfg.lease_seconds)
        self._interval = cfg.heartbeat_seconds
        self._done = threading.Event()
        self.lost = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{run_id}", daemon=True)

    def __enter__(self) -> Lease:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._done.wait(self._interval):
            try:
                with self._session_factory.begin() as session:
                    ours = runs_db.renew_lease(
                        session, self._run_id, self._worker, utcnow() + self._length
                    )
            except Exception:  # a DB blip must not kill the run; the next beat retries
                log.exception("could not renew the lease of run %s", self._run_id)
                continue
            if not ours:
                log.warning("run %s is no longer ours (cancelled or recovered)", self._run_id)
                self.lost.set()
                return


def execute_run(
    session_factory: SessionFactory, config: RunnerConfig, run_id: str, worker: str
) -> RunStatus | None:
    """Run a queued run to its end; None when it was not ours to run (claimed or finished)."""
    settings = config.settings
    with session_factory.begin() as session:
        run = runs_db.claim_run(
            session, run_id, worker, utcnow() + timedelta(seconds=settings.lease_seconds)
        )
        if run is None:
            log.info("run %s is already claimed or finished; nothing to do", run_id)
            return None
        try:
            rule: Rule | None = rules_db.load_rule(rules_db.get_rule(session, run.rule_id))
            setup_error = None
        except AdeError as exc:
            rule, setup_error = None, f"cannot run: {exc.message}"
        trigger = dict(run.trigger)
        runs_db.append_event(
            session, run_id, "run.started", {"worker": worker, "attempt": run.attempt}
        )

    if rule is None:
        return _finish(session_factory, run_id, worker, RunStatus.FAILED, setup_error)
    if rule.execution.kind != "built-in":
        unsupported = (
            f"rule {run.rule_id!r} uses execution kind {rule.execution.kind!r}, which this "
            "version of ADE Tasks does not run yet; only built-in actions are available"
        )
        return _finish(session_factory, run_id, worker, RunStatus.FAILED, unsupported)

    try:
        project_root = settings.project_root(rule.project)
    except AdeError as exc:
        return _finish(session_factory, run_id, worker, RunStatus.FAILED, exc.message)

    deadline = time.monotonic() + rule.guardrails.max_duration_min * 60
    with Lease(session_factory, run_id, worker, settings) as lease:
        try:
            status, error = _run_steps(
                session_factory,
                config,
                run_id,
                rule,
                trigger,
                project_root,
                deadline,
                lambda: lease.lost.is_set() or SHUTDOWN.is_set(),
            )
        except Exception as exc:  # e.g. the database refused a step's record: end the run clearly
            log.exception("run %s failed inside the runner", run_id)
            status, error = RunStatus.FAILED, f"internal error while running the steps: {exc!r}"
        if lease.lost.is_set():
            log.warning("run %s lost its lease; its outcome is decided elsewhere", run_id)
            return None
    if SHUTDOWN.is_set() and status is not RunStatus.SUCCEEDED:
        status, error = RunStatus.CANCELLED, SHUTDOWN_ERROR
    return _finish(session_factory, run_id, worker, status, error)


def _run_steps(
    session_factory: SessionFactory,
    config: RunnerConfig,
    run_id: str,
    rule: Rule,
    trigger: dict[str, Any],
    project_root: Path,
    deadline: float,
    should_stop: Callable[[], bool],
) -> tuple[RunStatus, str | None]:
    assert rule.execution.kind == "built-in"
    for index, action in enumerate(rule.execution.actions):
        if should_stop():
            return RunStatus.CANCELLED, SHUTDOWN_ERROR
        with session_factory.begin() as session:
            runs_db.start_step(session, run_id, index, action.id, action.type)
        context = StepContext(
            run_id=run_id,
            rule=rule,
            trigger=trigger,
            step_index=index,
            project_root=project_root,
            env_allowlist=config.settings.command_env_allowlist,
            base_env=config.base_env,
            time_left=lambda: deadline - time.monotonic(),
            should_stop=should_stop,
            kill_grace=config.settings.kill_grace_seconds,
        )
        outcome = _execute_step(config, action, context)
        with session_factory.begin() as session:
            runs_db.finish_step(
                session,
                run_id,
                index,
                status=outcome.status,
                exit_code=outcome.exit_code,
                output=outcome.output,
                result=outcome.result,
                error=outcome.error,
            )
        if outcome.status is StepStatus.SUCCEEDED or action.continue_on_failure:
            continue
        where = f"step {action.id!r} (#{index + 1})"
        if outcome.status is StepStatus.TIMED_OUT:
            return RunStatus.TIMED_OUT, f"{where} timed out: {outcome.error}"
        return RunStatus.FAILED, f"{where} failed: {outcome.error}"
    return RunStatus.SUCCEEDED, None


def _execute_step(config: RunnerConfig, action: object, context: StepContext) -> StepOutcome:
    kind = getattr(action, "type", "?")
    executor = config.executors.get(kind)
    if executor is None:
        return StepOutcome(
            StepStatus.FAILED, error=f"action type {kind!r} is not available on this worker"
        )
    try:
        return executor(action, context)
    except Exception as exc:  # an executor bug must end the step, not leave it running
        log.exception("step %s of run %s crashed", context.step_index, context.run_id)
        return StepOutcome(StepStatus.FAILED, error=f"internal error in {kind}: {exc!r}")


def _finish(
    session_factory: SessionFactory, run_id: str, worker: str, status: RunStatus, error: str | None
) -> RunStatus | None:
    with session_factory.begin() as session:
        if not runs_db.finish_run(session, run_id, worker, status, error):
            return None
        runs_db.append_event(session, run_id, "run.finished", {"status": status, "error": error})
    log.info("run %s finished: %s%s", run_id, status, f" ({error})" if error else "")
    return status
