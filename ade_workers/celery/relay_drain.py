"""The beats' relay drain: one beat at a time drains the relay, woken by its WebSocket.

While ADE_RELAY__URL is set, every beat offers the housekeeping job `relay-drain`, whose slot
(`ADE_RELAY__DRAIN_SLOT_SECONDS`, 30 s by default) is claimed once across all beats
(`ade_tasks.housekeeping`). The beat that wins a slot, in a thread of its own so its ticks go on:

1. drains the relay (`ade_tasks.relay.drain.drain`): the safety poll that covers wake-ups lost
   while no one listened;
2. opens `/relay/v1/wake` and drains again on every wake-up, until shortly before the slot ends;
3. the next slot's winner (this beat or another) takes over. A beat that dies mid-slot leaves
   the relay undrained for the rest of that slot at most.

A failed drain ends the slot and backs off as the GitHub poller does (`ade_tasks.retry.Backoff`):
after the n-th failure in a row no beat drains for slot x 2^(n-1) seconds (at most 15 min), or
for as long as the relay's `Retry-After` asked (429, 503; believed up to 65 min), whichever is
longer. The wait is held for the whole cluster by claiming the slots it covers as skipped
(`ade_tasks.db.occurrences.hold`), so another beat does not knock meanwhile. The count of
failures is the beat's own: a beat that wins after another beat's failures starts at the slot's
wait again. A relay that answers a non-advancing cursor is logged as an error and backs off the
same way. Every drain, failed or not, writes this beat's `relay-drain` heartbeat with the relay,
the cursor and the error (and, after a failure, when the next try is due), if any: rule health
counts a github.* trigger ready through the relay while a drain's heartbeat is recent and
without error, and `/metrics` reports `ade_relay_drain_ok`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import datetime, timedelta

from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from ade_tasks.clock import utcnow
from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import AdeError
from ade_tasks.housekeeping import HOUSEKEEPING, Job
from ade_tasks.json_document import JsonObject
from ade_tasks.relay.client import WAKE_PATH, HttpRelayClient, RelayUnavailableError
from ade_tasks.relay.drain import DrainReport, drain
from ade_tasks.retry import Backoff, retry_after_of
from ade_tasks.runs.senders import IngressSender
from ade_tasks.settings import Settings

log = logging.getLogger(__name__)

JOB = "relay-drain"
#: The slot's thread stops this long before the slot ends, so the next winner never overlaps.
MARGIN_SECONDS = 0.5


class RelayDrainer:
    """One beat's part in draining the relay: the job it offers and the slots it wins."""

    def __init__(
        self, session_factory: SessionFactory, sender: IngressSender, settings: Settings, owner: str
    ) -> None:
        relay = settings.relay
        self._session_factory = session_factory
        self._sender = sender
        self._hooks = settings.hooks
        self._token = relay.token.get_secret_value() if relay.token else ""
        self._agent = f"ade-tasks-drain ({owner})"
        self._client = HttpRelayClient(relay.url, self._token, agent=self._agent)
        self._every = timedelta(seconds=relay.drain_slot_seconds)
        # The first failure waits for the next slot, as the drain always did; later ones longer.
        self.backoff = Backoff(initial=relay.drain_slot_seconds)
        self._failures = 0
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
        retry_after: float | None = None
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
            error, retry_after = exc.message, retry_after_of(exc)
            log.warning("relay drain: %s", error)
        except AdeError as exc:  # a non-advancing cursor, a refused token, a malformed page
            error = exc.message
            log.error("relay drain stopped: %s", error)
        except Exception as exc:  # the database or the broker; the cursor stayed put
            error = f"the drain failed on the cluster's side: {exc!r}"
            log.exception("relay drain failed; it backs off and tries again")
        else:
            self._cursor = report.cursor
            self._failures = 0
            _log_report(self._client.url, report)
        wait = None if error is None else self._back_off(retry_after)
        self._heartbeat(error, wait)
        return error is None

    def _back_off(self, retry_after: float | None) -> float:
        """Hold the drain's slots for the wait the failures so far (and the relay) ask for;
        returns the wait in seconds."""
        self._failures += 1
        wait = timedelta(seconds=self.backoff.delay_for(self._failures, retry_after))
        now = utcnow()
        slot = self.job().slot(now)
        # Slots are the drain's rhythm, so the backoff counts from the failed slot's start (the
        # first failure leaves the next slot free); a Retry-After counts from now, as asked.
        until = now + wait if retry_after else slot + wait
        try:
            with self._session_factory.begin() as session:
                occ_db.hold(
                    session, HOUSEKEEPING, JOB, slot=slot, every=self._every, until=until,
                    owner=self._owner,
                )  # fmt: skip
        except Exception as exc:  # the next slot is then offered as usual
            log.warning("relay drain: could not hold its backoff: %s", type(exc).__name__)
        seconds = max((until - now).total_seconds(), 0.0)
        log.warning(
            "relay drain: %d failure(s) in a row; next try in %.0fs or later",
            self._failures, seconds,
        )  # fmt: skip
        return seconds

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

    def _heartbeat(self, error: str | None, wait: float | None = None) -> None:
        detail: JsonObject = {"relay": self._client.url, "cursor": self._cursor}
        if error is not None:
            detail["error"] = error
        if wait is not None:
            detail["retry_in_seconds"] = round(wait, 1)
        # A slot's worth of interval (the next winner writes its own within one slot), or the
        # backoff's: the failure stays what health reports, not "the drain is gone".
        every = max(self._every.total_seconds(), wait or 0.0)
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
    session_factory: SessionFactory, sender: IngressSender, settings: Settings, owner: str
) -> list[Job]:
    """The drain's job for a beat when ADE_RELAY__URL is set (none otherwise)."""
    if not settings.relay.url:
        return []
    return [RelayDrainer(session_factory, sender, settings, owner).job()]
