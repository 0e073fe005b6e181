"""EventWriter's writer tasks (the INSERT itself stubbed; tests/integration/test_event_writer.py
runs it on PostgreSQL): no row is ever left waiting without a writer."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from ade_api.event_writer import EventWriter


def row(delivery: str) -> dict[str, Any]:
    return {"source": "github", "delivery_id": delivery, "body_hash": None}


def test_a_row_arriving_as_the_last_writers_finish_still_gets_written() -> None:
    async def scenario() -> int | None:
        stored: list[int] = []
        writer = EventWriter("postgresql://nobody@127.0.0.1:1/none", stored.append)
        gate = asyncio.Event()
        ids = itertools.count(1)

        async def insert(rows: list[dict[str, Any]]) -> list[int | None]:
            await gate.wait()
            return [next(ids) for _ in rows]

        writer._insert = insert  # type: ignore[method-assign]
        # Two rows with the same key go to two INSERTs: both writers are busy.
        first = asyncio.ensure_future(writer.record(row("d-1")))
        second = asyncio.ensure_future(writer.record(row("d-1")))
        await asyncio.sleep(0.01)
        gate.set()
        await asyncio.sleep(0)  # both writers finish in this step of the loop, before us
        async with asyncio.timeout(2):  # (wait_for would run it in a task of its own, later)
            late = await writer.record(row("d-2"))
        await asyncio.gather(first, second)
        assert sorted(stored) == [1, 2, 3]
        return late

    assert asyncio.run(scenario()) == 3
