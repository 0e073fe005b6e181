"""The Celery beat scheduler of ADE Tasks: several beats may run at once, all active.

`celery -A ade_workers.celery.app beat -S ade_workers.celery.beat:DatabaseScheduler` (what
`ade-tasks beat` runs). Each tick fires the rules' schedules and the housekeeping jobs through the
claims in the database (`ade_tasks.schedule.scheduler`, `ade_tasks.housekeeping`); Celery's own
schedule entries, if any are configured, still run as with the default scheduler.

Each part of a tick fails on its own: Celery's entries, the rules' schedules and the housekeeping
jobs (each job in its own boundary too), so a database error while firing schedules, or one rule
the scheduler cannot evaluate, never stops the recovery sweep, retention or lane cleanups.

A beat also polls GitHub in a thread of its own, claimed per repository across the beats
(`ade_workers.celery.beat_poller`; `ADE_GITHUB__POLL` turns it on or off).

Every `HEARTBEAT_SECONDS` a beat also writes its heartbeat (`ade_tasks.db.heartbeats`, real
time even on a simulated clock), which is how rule health knows a schedule will fire.

A beat judges time by the database's clock, not its machine's (`ade_tasks.db.clock`): it reads
it before it fires anything and every `CHECK_EVERY` after, logs when its own clock is off by more
than 2 s, and puts the offset in its heartbeat (the API's `/metrics` shows it as
`ade_beat_clock_offset_seconds`).
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import TypeVar

from celery import Celery
from celery.beat import Scheduler as CeleryScheduler

from ade_tasks.clock import utcnow
from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db.clock import DatabaseClock, read_clock
from ade_tasks.housekeeping import Housekeeping, standard_jobs
from ade_tasks.schedule.scheduler import Scheduler, simulated_clock
from ade_workers.celery import beat_poller
from ade_workers.celery.app import CelerySender
from ade_workers.celery.relay_drain import relay_jobs
from ade_workers.engine import cleanups  # noqa: F401  (registers the lane-cleanup sweep)
from ade_workers.integrations import notifier  # noqa: F401  (registers notification jobs)

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How often a beat ticks: a slot fires within about this long after its minute begins.
TICK_SECONDS = 1.0
#: How long after a slot's start the beat wakes for it (a wake exactly at the minute could read
#: the clock a hair before it and find nothing due).
SLOT_WAKE_MARGIN = 0.005
#: How often a beat says it is alive (rule health counts it gone after this and a grace).
HEARTBEAT_SECONDS = 10.0
#: The beat's cyclic garbage collector thresholds. At a boundary a beat keeps what it fires for
#: good (each rule's parsed document, its snapshot), so with Python's defaults (700, 10, 10)
#: full collections walk the whole growing heap again and again: 30,000 slots fired by one beat
#: cost 8 full collections and a quarter of its CPU (0.43 against 0.33 ms an occurrence,
#: docs/performance.md "The scheduler"). Collecting young objects every 50,000 allocations
#: instead of 700 keeps cycles collected, just later. It is the process's setting: in
#: `ade-tasks dev` the API and the worker threads that share the beat's process get it too.
GC_THRESHOLDS = (50_000, 20, 10)


class DatabaseScheduler(CeleryScheduler):  # type: ignore[misc]
    """Fires rule schedules and housekeeping from claims in the database."""

    def __init__(self, app: Celery, *args: object, **kwargs: object) -> None:
        super().__init__(app, *args, **kwargs)
        gc.set_threshold(*GC_THRESHOLDS)
        runtime = app.ade_runtime
        self.beat_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        sender = CelerySender(app)
        settings = runtime.settings
        clock = utcnow
        self._clock_speed = 1.0
        if settings.beat_clock_origin is not None:
            self._clock_speed = settings.beat_clock_speed
            clock = simulated_clock(
                settings.beat_clock_origin, settings.beat_clock_speed, settings.beat_clock_anchor
            )
            log.warning("beat %s runs on a simulated clock (tests only)", self.beat_id)
        self._schedules = Scheduler(
            runtime.session_factory,
            sender,
            self.beat_id,
            clock=clock,
            stale_after=timedelta(seconds=settings.beat_stale_claim_seconds),
            automations_disabled=settings.disable_automations,
        )
        jobs = standard_jobs(runtime.session_factory, sender, runtime.settings)
        # Only beats drain the relay (a worker's housekeeping has no slot thread to spare).
        jobs += relay_jobs(runtime.session_factory, sender, runtime.settings, self.beat_id)
        self._housekeeping = Housekeeping(runtime.session_factory, self.beat_id, jobs)
        self._session_factory = runtime.session_factory
        self._db_clock = DatabaseClock(partial(read_clock, runtime.session_factory), self.beat_id)
        self._last_heartbeat: float | None = None
        self._sender = sender
        self.poller: beat_poller.BeatPoller | None = None
        self._poller_checked = False
        log.info("beat %s fires schedules claimed in the database", self.beat_id)

    def tick(self, *args: object, **kwargs: object) -> float:
        interval = _guarded("Celery's schedule entries", partial(super().tick, *args, **kwargs))
        _guarded("reading the database's clock", self._db_clock.check)
        if self._db_clock.offset is None:  # never judge a slot by this machine's clock alone
            return TICK_SECONDS
        _guarded("firing the rules' schedules", self._fire_schedules)
        _guarded("housekeeping", lambda: self._housekeeping.tick(self._schedules.now()))
        _guarded("the heartbeat", self._heartbeat)
        if not self._poller_checked:
            # On the first tick, not in __init__: Celery builds more than one scheduler per beat
            # process, and only the one that ticks may poll (else one beat would poll twice).
            self._poller_checked = True
            self.poller = _guarded("starting GitHub polling", self._start_poller)
        return min(
            float(interval if interval is not None else TICK_SECONDS),
            TICK_SECONDS,
            self._until_next_slot(),
        )

    def _until_next_slot(self) -> float:
        """Real seconds until just after the next slot of any schedule, so the tick that fires a
        minute's slots starts as that minute begins instead of up to a tick later."""
        slot = self._schedules.next_slot()
        if slot is None:
            return TICK_SECONDS
        ahead = (slot - self._schedules.now()).total_seconds() / self._clock_speed
        # A slot already past was not taken by this tick (the tick failed, say, with the
        # database away): retry at the usual pace, not in a tight loop.
        return TICK_SECONDS if ahead < 0 else ahead + SLOT_WAKE_MARGIN

    def close(self) -> None:
        if self.poller is not None:
            self.poller.stop()
        super().close()

    def _start_poller(self) -> beat_poller.BeatPoller | None:
        settings = self.app.ade_runtime.settings
        return beat_poller.start_if_enabled(
            self._session_factory, self._sender, settings, self.beat_id
        )

    def _fire_schedules(self) -> None:
        report = self._schedules.tick()
        if report.fired or report.skipped or report.missed:
            log.info(
                "fired %d, skipped %d, missed %d (%d claimed by other beats)",
                len(report.fired),
                len(report.skipped),
                len(report.missed),
                report.lost,
            )
        for key, reason in report.skipped.items():
            log.warning("skipped %s: %s", key, reason)

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if self._last_heartbeat is not None and now - self._last_heartbeat < HEARTBEAT_SECONDS:
            return
        with self._session_factory.begin() as session:
            heartbeats_db.record(
                session,
                self.beat_id,
                heartbeats_db.BEAT,
                every=HEARTBEAT_SECONDS,
                now=utcnow(),
                detail={"clock_offset": self._db_clock.offset},
            )
        self._last_heartbeat = now


def _guarded(what: str, work: Callable[[], T]) -> T | None:
    """Run one part of a tick; its failure is logged and leaves the other parts running (the
    database may be briefly away: the next tick retries)."""
    try:
        return work()
    except Exception:
        log.exception("beat tick: %s failed", what)
        return None
