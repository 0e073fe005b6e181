"""The engine's hold on the runs it executes: one monitor thread per worker process renews
each run's lease (its heartbeat), looks for a cancel, and fences a run whose lease it can no
longer confirm, so a run is never executed by two workers at once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar, TypeVarTuple

from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.run_steps import StepRecord
from ade_tasks.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
Args = TypeVarTuple("Args")

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
            self._write(run_steps_db.announce_step, pending[0])
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

    def should_stop(self) -> bool:
        """Must the running step stop now: the run was lost (cancelled, taken over), its lease
        went unconfirmed too long, or the worker is shutting down?"""
        return self.lost.is_set() or self.fenced() or SHUTDOWN.is_set()

    def should_stop_now(self) -> bool:
        """`should_stop`, reading the run's row now rather than going by the monitor's last
        look (up to CANCEL_CHECK old): asked before an agent session acts on a model turn that
        may have arrived after its run was cancelled or superseded. One query; a database that
        does not answer leaves the decision to the monitor."""
        return self.should_stop() or self._check_cancelled()

    def given_up(self) -> bool:
        """Must the run stop here without an outcome of its own? Yes when it was cancelled (its
        row says so already) or when its lease was lost (the recovery sweep decides what comes
        of it)."""
        if self.cancelled.is_set():  # the monitor said so when it saw the cancel
            return True
        if self.lost.is_set() or self.fenced():
            log.warning("run %s lost its lease; its outcome is decided elsewhere", self.run_id)
            return True
        return False

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

    def _write(self, write: Callable[[Session, *Args], T], *args: *Args) -> T | None:
        """`write` in a transaction of its own; None when the database did not answer."""
        try:
            with self._sessions.begin() as session:
                return write(session, *args)
        except Exception:  # a DB blip must not end the run; the next tick retries
            log.exception("run %s: %s failed", self.run_id, write.__name__)
            return None
