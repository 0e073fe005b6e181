"""How the API's webhook and event routes store a delivery without holding up the event loop.

A delivery is answered once its `ingress_events` row is committed: that INSERT is the one
durable write of the request. On PostgreSQL `EventWriter` makes it without a thread hop, in
INSERTs shared by the deliveries arriving together; the embedded SQLite database of
`ade-tasks dev` is written from a thread by the intake's own `record`. Each stored event goes to
`IngressPublisher`, which hands it to the ingress workers after the answer through the intake's
`hand_over`, as the relay's and the poller's events are, so a slow or unreachable broker delays
dispatch, never an answer.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool

from ade_api.http.event_writer import EventWriter
from ade_api.http.ingress_publisher import IngressPublisher
from ade_tasks.db.engine import SessionFactory
from ade_tasks.ingress import intake
from ade_tasks.runs.senders import IngressSender
from ade_tasks.settings import Settings


class EventIntake:
    """Stores deliveries for the API's routes and queues them for the ingress workers."""

    def __init__(self, settings: Settings, session_factory: SessionFactory, sender: IngressSender):
        self._session_factory = session_factory
        self.publisher = IngressPublisher(partial(intake.hand_over, session_factory, sender))
        self._writer = (
            None if settings.embedded else EventWriter(settings.database_url, self.publisher.submit)
        )

    async def store(self, row: dict[str, Any]) -> int | None:
        """Store a delivery's `ade_tasks.ingress.intake.event_row` and queue it for the
        ingress workers: its event id, or None when its delivery id or body hash was seen (a
        duplicate: nothing stored)."""
        if self._writer is not None:
            return await self._writer.record(row)  # the writer queues what it stored
        event_id = await run_in_threadpool(intake.record, self._session_factory, row)
        if event_id is not None:
            self.publisher.submit(event_id)
        return event_id

    async def close(self) -> None:
        """Send what is still queued and close the pool (the API's shutdown)."""
        await asyncio.to_thread(self.publisher.close)
        if self._writer is not None:
            await self._writer.close()
