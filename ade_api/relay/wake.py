"""Wake-ups: the relay tells the drains listening on `/relay/v1/wake` that events arrived.

Each listener has a queue of one: a burst of deliveries while a drain is busy becomes one
wake-up (it drains everything after its cursor anyway), and a slow listener never holds up a
delivery.
"""

from __future__ import annotations

import asyncio


class WakeHub:
    """The listeners of one relay process and the newest cursor they were told about."""

    def __init__(self) -> None:
        self._listeners: set[asyncio.Queue[int]] = set()

    def listen(self) -> asyncio.Queue[int]:
        """A new listener's queue (call `leave` with it when the socket closes)."""
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
        self._listeners.add(queue)
        return queue

    def leave(self, queue: asyncio.Queue[int]) -> None:
        """Forget a listener."""
        self._listeners.discard(queue)

    def notify(self, cursor: int) -> None:
        """Tell every listener that events up to `cursor` are stored (from the event loop)."""
        for queue in self._listeners:
            if queue.full():
                queue.get_nowait()  # an unread wake-up is replaced by the newer one
            queue.put_nowait(cursor)

    @property
    def listeners(self) -> int:
        """How many drains listen now."""
        return len(self._listeners)
