"""Housekeeping from the workers: a cluster without a beat still recovers its runs.

The recovery sweep, retention pruning and the lane-cleanup sweep are claimed per period in the
database (`ade_tasks.housekeeping`), so any number of processes may offer to run them and each
period's job runs once. Beats always do; with `ADE_WORKER_HOUSEKEEPING` (on by default) every
worker's main process does too, from one thread that starts when the worker is ready and stops
with it. A webhook-only cluster (API and workers, no beat) thus re-sends lost messages and
resumes runs whose worker died within `ADE_LEASE_SECONDS` + `ADE_RECOVERY_INTERVAL_SECONDS`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

from celery import Celery
from celery.signals import worker_ready, worker_shutdown

from ade_tasks.clock import utcnow
from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.housekeeping import Housekeeping, standard_jobs
from ade_tasks.settings import Settings
from ade_workers.celery.sender import CelerySender
from ade_workers.engine import cleanups  # noqa: F401  (registers the lane-cleanup sweep)
from ade_workers.integrations import notifier  # noqa: F401  (registers notification jobs)
from ade_workers.sandbox import scratch

log = logging.getLogger(__name__)

#: How often the thread offers to run the jobs (each job's own period decides what is due).
TICK_SECONDS = 1.0
#: How often (in ticks) the session directories of this host's dead workers are swept.
SWEEP_EVERY_TICKS = 60


class WorkerHousekeeper:
    """One thread in a worker's main process ticking the claimed housekeeping jobs."""

    def __init__(self, app: Celery, settings: Settings) -> None:
        self._app = app
        self._settings = settings
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.owner = f"worker:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"

    def start(self) -> None:
        if self._thread is not None:
            return
        # An engine of its own, made after the pool forked, so no pool process shares it.
        engine = create_db_engine(self._settings.effective_database_url, pool_size=1)
        os.register_at_fork(after_in_child=lambda: engine.dispose(close=False))
        sessions = create_session_factory(engine)
        jobs = standard_jobs(sessions, CelerySender(self._app), self._settings)
        housekeeping = Housekeeping(sessions, self.owner, jobs)
        self._thread = threading.Thread(
            target=self._loop, args=(housekeeping,), name="ade-housekeeping", daemon=True
        )
        self._thread.start()
        log.info("worker %s takes part in housekeeping", self.owner)

    def stop(self) -> None:
        self._stop.set()

    def _loop(self, housekeeping: Housekeeping) -> None:
        ticks = 0
        while not self._stop.wait(TICK_SECONDS):
            ticks += 1
            if ticks % SWEEP_EVERY_TICKS == 0:  # this host's, so every worker sweeps
                scratch.sweep()
            try:
                housekeeping.tick(utcnow())
            except Exception:  # the database may be briefly away; the next tick retries
                log.exception("housekeeping tick of %s failed", self.owner)


def install(app: Celery, settings: Settings) -> None:
    """Start a housekeeper when a worker of `app` is ready (not in beats, APIs or clients);
    every worker, housekeeping or not, removes the session directories dead workers on this
    host left behind (`scratch.sweep`) when it is ready."""
    keeper = WorkerHousekeeper(app, settings) if settings.worker_housekeeping else None

    def on_ready(sender: object = None, **_: object) -> None:
        if getattr(sender, "app", None) is not app:
            return
        swept = scratch.sweep()
        if swept:
            log.info("removed %d session directories of dead workers", len(swept))
        if keeper is not None:
            keeper.start()

    def on_shutdown(**_: object) -> None:
        if keeper is not None:
            keeper.stop()

    # Weak references (the default) die with the app that holds the handlers.
    app.ade_housekeeper_handlers = (on_ready, on_shutdown)
    worker_ready.connect(on_ready)
    worker_shutdown.connect(on_shutdown)
