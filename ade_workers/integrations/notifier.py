"""The housekeeping jobs of cluster notifications in every beat and housekeeping worker
(`ade_tasks.notifications`): `notifications` queues the new events and hands the due ones to
delivery every `ADE_NOTIFICATIONS__SWEEP_SECONDS`; `notifications-prune` drops settled ones
every hour.

Delivery runs on one thread per route in the process that claimed the sweep's slot, never on
the housekeeping thread: the job returns at once, a route that is slow or down holds up only
its own notifications (its thread is busy, so the next sweeps leave that route's notifications
unclaimed), and the recovery sweep and the other routes go on.
"""

from __future__ import annotations

import os
import socket
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import partial

from ade_tasks.db import notifications as outbox
from ade_tasks.db.engine import SessionFactory
from ade_tasks.housekeeping import Job, register
from ade_tasks.notifications import delivery
from ade_tasks.notifications.events import queue_events
from ade_tasks.runs.senders import TaskSender
from ade_tasks.settings import NotificationSettings, Settings
from ade_workers.integrations.apprise_route import send_apprise


class Notifier:
    """Queues events and delivers due notifications, one thread per route."""

    def __init__(
        self,
        session_factory: SessionFactory,
        settings: NotificationSettings,
        *,
        link_base: str = "",
        send: delivery.Send | None = None,
    ) -> None:
        self._session_factory = session_factory
        self._settings = settings
        self._link_base = link_base
        self._send = send or self._send_apprise
        self._policy = delivery.retry_policy(settings)
        self._owner = f"{socket.gethostname()}:{os.getpid()}"
        self._lock = threading.Lock()
        self._threads: dict[str, ThreadPoolExecutor] = {}
        self._running: dict[str, list[Future[bool]]] = {}

    def sweep(self, now: datetime) -> dict[str, int]:
        """Queue the new events and start delivering the due notifications of idle routes."""
        queued = queue_events(self._session_factory, self._settings, now, link_base=self._link_base)
        busy = self.busy_routes()
        claimed = delivery.claim(self._session_factory, self._owner, now, busy_routes=busy)
        for notification in claimed:
            self._start(notification)
        return {"queued": queued, "delivering": len(claimed)}

    def busy_routes(self) -> set[str]:
        """The routes still delivering: a sweep leaves their due notifications unclaimed."""
        with self._lock:
            return {route for route, futures in self._running.items() if futures}

    def wait(self, timeout: float) -> None:
        """Wait for the deliveries started so far (tests, shutdown)."""
        with self._lock:
            futures = [f for running in self._running.values() for f in running]
        for future in futures:
            future.result(timeout)

    def _start(self, notification: outbox.Claimed) -> None:
        route = notification.route
        with self._lock:
            if route not in self._threads:
                self._threads[route] = ThreadPoolExecutor(1, f"ade-notify-{route}")
            future = self._threads[route].submit(
                delivery.deliver, self._session_factory, notification, self._send, self._policy
            )
            self._running.setdefault(route, []).append(future)
        future.add_done_callback(partial(self._done, route))

    def _done(self, route: str, future: Future[bool]) -> None:
        with self._lock:
            self._running[route].remove(future)

    def _send_apprise(self, route: str, title: str, body: str) -> None:
        configured = self._settings.routes.get(route)
        if configured is None:
            raise LookupError(
                f"route {route!r} is no longer configured (ADE_NOTIFICATIONS__ROUTES); its "
                "queued notifications fail"
            )
        send_apprise(configured.url.get_secret_value(), title, body, route=route)


@register
def notification_job(
    session_factory: SessionFactory, _sender: TaskSender, settings: Settings
) -> Job | None:
    """The `notifications` sweep as a housekeeping job (each slot runs once in the cluster);
    none where no route is configured."""
    if not settings.notifications.routes:
        return None
    notifier = Notifier(session_factory, settings.notifications, link_base=settings.api_url)
    return Job("notifications", timedelta(seconds=settings.notifications.sweep_seconds),
               notifier.sweep)  # fmt: skip


@register
def notification_prune_job(
    session_factory: SessionFactory, _sender: TaskSender, _settings: Settings
) -> Job:
    """Drop settled notifications past `outbox.KEEP`, every hour (also once routes are gone)."""

    def prune(now: datetime) -> int:
        with session_factory.begin() as session:
            return outbox.prune(session, now)

    return Job("notifications-prune", timedelta(hours=1), prune)
