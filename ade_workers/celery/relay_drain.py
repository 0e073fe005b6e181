"""The beats' relay drain: one beat at a time drains the relay, woken by its WebSocket.

While ADE_RELAY__URL is set, every beat offers the housekeeping job `relay-drain`, whose slot
(`ADE_RELAY__DRAIN_SLOT_SECONDS`, 30 s by default) is claimed once across all beats
(`ade_tasks.housekeeping`). The beat that wins a slot, in a thread of its own so its ticks go on:

1. drains the relay (`ade_tasks.relay.drain.drain`): the safety poll that covers wake-ups lost
   while no one listened;
2. opens `/relay/v1/wake` and drains again on every wake-up, until shortly before the slot ends;
3. the next slot's winner (this beat or another) takes over. A beat that dies mid-slot leaves
   the relay undrained for the rest of that slot at most.

A failed drain ends the slot: a relay that answers 5xx or cannot be reached is tried again in
the next slot (one request per slot while it is down, never a hot loop); so is a relay that
answers a non-advancing cursor, which is logged as an error. Every drain, failed or not, writes
this beat's `relay-drain` heartbeat with the relay, the cursor and the error, if any: rule
health counts a github.* trigger ready through the relay while a drain's heartbeat is recent
and without error, and `/metrics` reports `ade_relay_drain_ok`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from ade_tasks.clock import utcnow
from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import AdeError
from ade_tasks.housekeeping import Job
from ade_tasks.relay.client import WAKE_PATH, HttpRelayClient, RelayUnavailableError
from ade_tasks.relay.drain import DrainReport, drain
from ade_tasks.runs.dispatch import TaskSender
from ade_tasks.settings import Settings

log = logging.getLogger(__name__)

JOB = "relay-drain"
#: The slot's thread stops this long before the slot ends, so the next winner never overlaps.
MARGIN_SECONDS = 0.5


class RelayDrainer:
    """One beat's part in draining the relay: the job it offers and the slots it wins."""

    def __init__(
        self, session_factory: SessionFactory, sender: TaskSender, settings: Settings, owner: str
    ) -> None:
        relay = settings.relay
        self._session_factory = session_factory
        self._sender = sender
        self._hooks = settings.hooks
        self._token = relay.token.get_secret_value() if relay.token else ""
        self._agent = f"ade-tasks-drain ({owner})"
        self._client = HttpRelayClient(relay.url, self._token, agent=self._agent)
        self._every = timedelta(seconds=relay.drain_slot_seconds)
        self._process_id = f"{owner}/relay"
        self._owner = owner
        self._cursor = 0
        self._thread: threading.Thread | None = None

    def job(self) -> Job:
        """The housekeeping job whose slots this beat offers to drain in."""
        return Job(JOB, self._every, self.start_slot)

    def start_slot(self, now: datetime) -> str:
        """Start draining for the slot just won (the beat's tick returns at once)."""
        if self._thread is not None and self._thread.is_alive():
            return "the previous slot is still draining"
        slot_end = self.job().slot(now) + self._every
        remaining = min((slot_end - now).total_seconds(), self._every.total_seconds())
        deadline = time.monotonic() + remaining - MARGIN_SECONDS
        self._thread = threading.Thread(
            target=self._run_slot, args=(deadline,), name="ade-relay-drain", daemon=True
        )
        self._thread.start()
        return "draining"

    def _run_slot(self, deadline: float) -> None:
        if self._drain_once(deadline):
            self._listen(deadline)

    def _drain_once(self, deadline: float) -> bool:
        """Drain the relay now; False (logged, heartbeat with the error) when it failed."""
        error: str | None = None
        try:
            report = drain(
                self._session_factory,
                self._sender,
                self._client,
                self._hooks,
                drainer=self._owner,
                deadline=deadline,
            )
        except RelayUnavailableError as exc:
            error = exc.message
            log.warning("relay drain: %s", error)
        except AdeError as exc:  # a non-advancing cursor, a refused token, a malformed page
            error = exc.message
            log.error("relay drain stopped: %s", error)
        except Exception as exc:  # the database or the broker; the cursor stayed put
            error = f"the drain failed on the cluster's side: {exc!r}"
            log.exception("relay drain failed; the next slot tries again")
        else:
            self._cursor = report.cursor
            _log_report(self._client.url, report)
        self._heartbeat(error)
        return error is None

    def _listen(self, deadline: float) -> None:
        """Drain again on each wake-up until `deadline`; without wake-ups, wait for the next
        slot's safety poll."""
        url = "ws" + self._client.url.removeprefix("http") + WAKE_PATH
        try:
            with connect(
                url,
                additional_headers={"Authorization": f"Bearer {self._token}"},
                user_agent_header=self._agent,
                open_timeout=min(5.0, max(0.1, deadline - time.monotonic())),
                close_timeout=1,
            ) as socket:
                while (remaining := deadline - time.monotonic()) > 0:
                    try:
                        message = socket.recv(timeout=remaining)
                    except TimeoutError:
                        return
                    if _newer(message, self._cursor) and not self._drain_once(deadline):
                        return
        except (OSError, TimeoutError, WebSocketException) as exc:
            log.warning(
                "relay drain: no wake-ups from %s (%s); the next slot polls the relay", url, exc
            )

    def _heartbeat(self, error: str | None) -> None:
        detail: dict[str, Any] = {"relay": self._client.url, "cursor": self._cursor}
        if error is not None:
            detail["error"] = error
        # A slot's worth of interval: the next winner writes its own within one slot.
        every = self._every.total_seconds()
        try:
            with self._session_factory.begin() as session:
                heartbeats_db.record(
                    session,
                    self._process_id,
                    heartbeats_db.RELAY_DRAIN,
                    every=every,
                    now=utcnow(),
                    detail=detail,
                )
        except Exception:  # the database is away; rule health will say the drain is gone
            log.exception("relay drain: could not write its heartbeat")


def _newer(message: str | bytes, cursor: int) -> bool:
    """Does a wake-up (or the hello) announce events after `cursor`? Unreadable: assume so."""
    try:
        document = json.loads(message)
        announced = document.get("cursor", document.get("newest"))
    except (ValueError, AttributeError):
        return True
    return not isinstance(announced, int) or announced > cursor


def _log_report(url: str, report: DrainReport) -> None:
    counts = ", ".join(f"{count} {outcome}" for outcome, count in sorted(report.outcomes.items()))
    if counts:
        log.info("relay %s drained to cursor %d: %s", url, report.cursor, counts)


def relay_jobs(
    session_factory: SessionFactory, sender: TaskSender, settings: Settings, owner: str
) -> list[Job]:
    """The drain's job for a beat when ADE_RELAY__URL is set (none otherwise)."""
    if not settings.relay.url:
        return []
    return [RelayDrainer(session_factory, sender, settings, owner).job()]
