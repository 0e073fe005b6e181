"""Celery tasks: thin shells that take a run id and call the domain code."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import timedelta

from celery import Celery, Task

from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.runs.approvals import expire_inputs
from ade_tasks.runs.recovery import recover
from ade_tasks.runs.senders import TaskSender
from ade_tasks.settings import Settings
from ade_tasks.states import RunStatus
from ade_tasks.triggers.ingress_events import EventDeferredError, match_ingress_event
from ade_workers.celery.sender import CelerySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig, RunNotice

log = logging.getLogger(__name__)

#: Run outcomes that make the run's task a failed task (Flower's Failed filter, `task-failed`).
#: A cancelled or skipped run did what was asked of it; its task succeeded.
FAILED_RUN = frozenset({RunStatus.FAILED, RunStatus.TIMED_OUT})


class RunFailedError(Exception):
    """The run this task executed ended failed or timed out; the run's record says why.

    Raised only after the run's outcome is recorded, so the task's FAILURE state tells
    Flower and task events the truth. It is one of the task's expected exceptions (`throws`):
    Celery logs it without a traceback, and the late ack still happens (Celery acks a task
    that raised unless `task_acks_on_failure_or_timeout` is off), so the message is never
    redelivered and the run never runs twice.
    """

    def __init__(self, run_id: str, status: RunStatus) -> None:
        # The message is the only arg, so Flower (which shows the exception's repr) reads it.
        super().__init__(f"run {run_id} ended {status}; `ade-tasks runs show {run_id}` says why")
        self.run_id = run_id
        self.status = status

    def __reduce__(self) -> tuple[type[RunFailedError], tuple[str, RunStatus]]:
        # Celery checks that a task's exception pickles back; rebuild it from its fields.
        return type(self), (self.run_id, self.status)


class WorkerRuntime:
    """Per-process resources of a worker, created lazily after the pool forks."""

    def __init__(self, settings: Settings, session_factory: SessionFactory | None = None) -> None:
        self.settings = settings
        self._given = session_factory
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._session_factory: SessionFactory | None = None
        self._runner: RunnerConfig | None = None
        self.sender: TaskSender | None = None
        # Hears of every run starting and ending here; set before the worker takes tasks.
        self.on_run: Callable[[RunNotice], None] | None = None

    @property
    def session_factory(self) -> SessionFactory:
        if self._given is not None:
            return self._given
        with self._lock:
            # An engine must never cross a fork: rebuild it in each pool process.
            if self._session_factory is None or self._pid != os.getpid():
                engine = create_db_engine(self.settings.effective_database_url)
                self._session_factory = create_session_factory(engine)
                self._pid = os.getpid()
            return self._session_factory

    @property
    def runner(self) -> RunnerConfig:
        if self._runner is None:
            self._runner = RunnerConfig.from_settings(self.settings, self.sender, self.on_run)
        return self._runner


def register_tasks(
    app: Celery, settings: Settings, session_factory: SessionFactory | None = None
) -> WorkerRuntime:
    """Define the ADE tasks on `app`; returns the runtime they share."""
    runtime = WorkerRuntime(settings, session_factory)
    runtime.sender = CelerySender(app)
    # shared=False: Celery would otherwise hand these closures to every app created later,
    # and a second app (tests, embedded mode) would run with the first one's settings.
    app.ade_runtime = runtime

    @app.task(
        name="ade.runs.execute",
        bind=True,
        acks_late=True,
        ignore_result=True,
        shared=False,
        throws=(RunFailedError,),
    )
    def execute(self: Task[[str], str | None], run_id: str) -> str | None:
        worker = f"{self.request.hostname}:{os.getpid()}:{threading.get_ident()}"
        status = execute_run(runtime.session_factory, runtime.runner, run_id, worker)
        if status in FAILED_RUN:
            raise RunFailedError(run_id, status)
        return str(status) if status else None

    # The task keeps its first name, `ade.ingress.dispatch`: messages queued by an older API
    # (and the recovery sweeps of older beats) name it, and a rename would strand them.
    @app.task(name="ade.ingress.dispatch", acks_late=True, ignore_result=True, shared=False)
    def match_ingress(*event_ids: int) -> list[str | None]:
        """One message carries one event, or (from the API's publisher) a batch of them, each
        matched on its own: a failing event is recorded failed, and one the database failed
        under (while reading, matching or recording it) stays `received` for the recovery
        sweep; either way the next one still runs. Matching is bounded in time (`ade_tasks.
        triggers.ingress_events.MATCH_DEADLINE_SECONDS`), so no event holds the worker."""
        assert runtime.sender is not None
        statuses: list[str | None] = []
        for event_id in event_ids:
            try:
                status = match_ingress_event(
                    runtime.session_factory,
                    runtime.sender,
                    event_id,
                    automations_disabled=settings.disable_automations,
                    own_logins=settings.github.bot_logins,
                )
            except EventDeferredError as exc:
                log.warning("%s", exc.message)
                status = None
            except Exception:
                log.exception("ingress event %s was left for the recovery sweep", event_id)
                status = None
            statuses.append(str(status) if status else None)
        return statuses

    @app.task(name="ade.control.recover", ignore_result=True, shared=False)
    def recover_runs() -> dict[str, list[str]]:
        assert runtime.sender is not None
        report = recover(
            runtime.session_factory,
            runtime.sender,
            requeue_after=timedelta(seconds=settings.requeue_after_seconds),
        )
        # Tool calls nobody answered within their session's approval_timeout_min.
        declined = expire_inputs(runtime.session_factory, runtime.sender)
        return {
            "failed": report.failed,
            "resumed": report.resumed,
            "resent": report.resent,
            "unsent": report.unsent,
            "declined_unanswered": declined,
        }

    return runtime
