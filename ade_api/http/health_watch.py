"""Notifying of rule health changes (`rule.health_changed`, `ade_tasks.notifications`), judged
where the API runs: the same view as `rules show`, `GET /api/v1/rules/{id}` and the metric
`ade_rule_ready` (`health_state.live_state`), so a notification never contradicts what the
API says. Workers and beats could judge it too, but their settings differ from the API's (the
GitHub webhook secret lives with the API), and two views would flap.

Each API process runs one thread while routes are configured; the check is a claimed
housekeeping job (`notify-health`, every `ADE_NOTIFICATIONS__SWEEP_SECONDS`), so however many
API processes run, each slot is judged once. Enabled rules only: a disabled rule fires nothing
either way. The notifications are queued in the outbox and delivered by the workers' and
beats' `notifications` job like every other.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from ade_api.http.health_state import health_of, live_state
from ade_tasks.clock import utcnow
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.housekeeping import Housekeeping, Job
from ade_tasks.notifications.events import queue_health_changes
from ade_tasks.settings import Settings

log = logging.getLogger(__name__)

#: How often the thread offers to run the job (the job's own period decides when it is due).
TICK_SECONDS = 1.0


def health_words(session: Session, settings: Settings, now: datetime) -> dict[str, str]:
    """Each enabled rule's health as the API judges it at `now`: `ready`, or
    `not ready: <why>`."""
    state = replace(live_state(session, settings), now=now)
    words = {}
    for row in rules_db.list_rules(session):
        if row.enabled:
            health = health_of(row, state)
            words[row.id] = "ready" if health.ready else f"not ready: {'; '.join(health.errors)}"
    return words


def health_job(session_factory: SessionFactory, settings: Settings) -> Job:
    """The `notify-health` housekeeping job: queue a notification per health change."""

    def check(now: datetime) -> int:
        return queue_health_changes(
            session_factory,
            settings.notifications,
            lambda session: health_words(session, settings, now),
            now,
            link_base=settings.api_url,
        )

    return Job("notify-health", timedelta(seconds=settings.notifications.sweep_seconds), check)


class HealthWatch:
    """One thread in an API process ticking the `notify-health` job."""

    def __init__(self, session_factory: SessionFactory, settings: Settings) -> None:
        owner = f"api:{socket.gethostname()}:{os.getpid()}"
        self._housekeeping = Housekeeping(
            session_factory, owner, [health_job(session_factory, settings)]
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ade-health-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            try:
                self._housekeeping.tick(utcnow())
            except Exception:  # the database may be briefly away; the next tick tries again
                log.exception("the rule health check for notifications failed")
