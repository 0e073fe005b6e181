"""EventWriter's writer tasks (the INSERT or the pool stubbed; tests/integration/test_event_writer.py
runs it on PostgreSQL): no row is ever left waiting without a writer, and a sender refused because
the database is down is not told where the database is."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, NoReturn

import psycopg
import pytest

from ade_api.http.event_writer import EventWriter
from ade_tasks.errors import DatabaseUnavailableError
from ade_tasks.ingress.intake import event_row


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


class DeadPool:
    """A pool whose database refuses connections, as psycopg reports it (host and port named)."""

    def connection(self, timeout: float) -> NoReturn:
        raise psycopg.OperationalError(
            'connection failed: connection to server at "db.internal" (10.0.0.7), port 5433 '
            "failed: Connection refused"
        )


def test_a_sender_refused_while_the_database_is_down_is_not_told_where_it_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a writer whose database refuses connections
    writer = EventWriter("postgresql://ade:s3cret-pw@db.internal:5433/events_db", [].append)

    async def dead_pool() -> DeadPool:
        return DeadPool()

    writer._open = dead_pool  # type: ignore[assignment,method-assign]

    # When a delivery is recorded
    async def record() -> BaseException | None:
        try:
            await writer.record(
                event_row(
                    source="github",
                    delivery_id="d-1",
                    event=None,
                    event_key="github.pr_opened",
                    payload={},
                    digest=None,
                    trigger_type="github.pr_opened",
                )
            )
        except DatabaseUnavailableError as exc:
            return exc
        return None

    with caplog.at_level(logging.WARNING, logger="ade_api.http.event_writer"):
        refused = asyncio.run(record())

    # Then the sender hears what happened and what to do, and the log says where
    assert isinstance(refused, DatabaseUnavailableError)
    assert refused.message == (
        "the database did not take the delivery (OperationalError); nothing was stored: "
        "redeliver it once the database is back"
    )
    logged = caplog.text
    assert (
        "postgresql://ade:***@db.internal:5433/events_db" in logged
        and "Connection refused" in logged
    )
    assert "s3cret-pw" not in logged
