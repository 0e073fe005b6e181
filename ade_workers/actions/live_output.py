"""A command step's output as it is printed: `step.output` events in the run's transcript, which
the follow stream, `run --wait`, `runs logs -f` and the web page show while the step runs.

The text arrives masked (the process reader's `StreamMasker`, so a secret split across two
writes is masked too) and is batched: one event per step at most every `BATCH_SECONDS`, so a
chatty step costs the database about one INSERT a second, and no text waits longer than a
second (the reader ticks every `STOP_CHECK_INTERVAL`). The live output of a step obeys the cap
of its stored output: its first `cap` characters are streamed, the last event then says the
cap was reached, and the rest is read from the step's stored output (head and tail) once it
ends. Nothing beyond the cap is kept, so the worker's memory stays flat however much a step
prints.

A step that ends within its first batch writes no event at all: its output reaches followers
with its record (`step.finished`), as before, for no statement more. A step that streamed
writes what waits when it ends, so its live output is whole (up to the cap).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ade_tasks.db import run_events as run_events_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.run_events import STEP_OUTPUT
from ade_tasks.json_document import JsonObject

log = logging.getLogger(__name__)

#: How long text gathers before it is written (plus at most one reader tick of 0.25 s: a second).
BATCH_SECONDS = 0.75


class LiveOutput:
    """Batches a step's masked output into `step.output` events, up to `cap` characters.

    Each event's data is `{"offset": n, "text": ...}` (`offset`: where the text starts in
    the step's output), and the last one `"capped": cap` when the cap cut the stream. A write
    that fails keeps its text for the next batch: live output is a view, the step's record is
    the record, so a database blip neither fails the step nor loses what the record holds.
    """

    def __init__(
        self,
        write: Callable[[JsonObject], None],
        cap: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self._cap = cap
        self._clock = clock
        self._pending: list[str] = []
        self._taken = 0  # characters kept: written or pending
        self._written = 0
        self._capped = False  # the cap cut the stream
        self._cap_said = False  # an event said so: nothing more is written
        self._last_write = clock()
        self.streamed = False

    def feed(self, text: str) -> None:
        """Take output as the reader passes it on (masked); write a batch that is due."""
        if not self._capped:
            room = self._cap - self._taken
            if len(text) > room:
                text, self._capped = text[:room], True
            if text:
                self._pending.append(text)
                self._taken += len(text)
        self.tick()

    def tick(self) -> None:
        """Write what waits if its batch is due (the reader calls this between reads)."""
        if self._waiting() and self._clock() - self._last_write >= BATCH_SECONDS:
            self._flush()

    def finish(self) -> None:
        """At the step's end: write what waits, if the step streamed at all (one that did
        not leaves its output to its record)."""
        if self.streamed and self._waiting():
            self._flush()

    def _waiting(self) -> bool:
        return bool(self._pending) or (self._capped and not self._cap_said)

    def _flush(self) -> None:
        text = "".join(self._pending)
        data: JsonObject = {"offset": self._written, "text": text}
        if self._capped:
            data["capped"] = self._cap
        self._last_write = self._clock()
        try:
            self._write(data)
        except Exception as exc:  # a view only: the step goes on, its record keeps the output
            log.warning("live output of a step was not written (retried next batch): %s", exc)
            return
        self._pending = []
        self._written += len(text)
        self._cap_said = self._capped
        self.streamed = True


def step_output_writer(
    sessions: SessionFactory, run_id: str, step_index: int
) -> Callable[[JsonObject], None]:
    """Appends one `step.output` event of the step to the run's transcript."""

    def write(data: JsonObject) -> None:
        with sessions.begin() as session:
            run_events_db.append_event(session, run_id, STEP_OUTPUT, data, step_index)

    return write
