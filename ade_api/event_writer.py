"""Writes the API's ingress events to PostgreSQL, sharing INSERTs between requests.

The webhook routes await `EventWriter.record(row)`. Rows wait for a writer task; up to
`WRITERS` run at once, each on its own connection of an asyncio psycopg pool (autocommit),
taking every row that waits (at most `MAX_ROWS`) into one multi-row INSERT. Under load one
round trip and one commit serve many deliveries; a lone delivery is written at once. Each row
still gets its own answer: its event id, None for a duplicate, or its own error (a row the
database refuses is retried alone, so it fails no other).
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy.engine import make_url

from ade_tasks.db import ingress as ingress_db
from ade_tasks.errors import DatabaseUnavailableError, InvalidInputError

#: Two writers keep the database busy while the rows for the next INSERT gather.
WRITERS = 2
MAX_ROWS = 50
POOL_WAIT_SECONDS = 5.0

Waiting = tuple[dict[str, Any], "asyncio.Future[int | None]"]


class EventWriter:
    """Event INSERTs shared between concurrent requests (see the module's docstring)."""

    def __init__(self, database_url: str) -> None:
        url = make_url(database_url).set(drivername="postgresql")  # libpq's own URL
        self._conninfo = url.render_as_string(hide_password=False)
        self._where = url.render_as_string(hide_password=True)
        self._pool: AsyncConnectionPool | None = None  # opened in the first request's loop
        self._opening: asyncio.Lock | None = None
        self._waiting: list[Waiting] = []
        self._writers: set[asyncio.Task[None]] = set()

    async def record(self, row: dict[str, Any]) -> int | None:
        """Store one `event_row`: its id, or None when its delivery id or body hash was seen."""
        answer: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._waiting.append((row, answer))
        if len(self._writers) < WRITERS:
            writer = asyncio.create_task(self._write())
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)
        return await answer

    async def close(self) -> None:
        """Close the pool; the next delivery opens another (in its own event loop)."""
        pool, self._pool, self._opening = self._pool, None, None
        if pool is not None:
            await pool.close()

    async def _open(self) -> AsyncConnectionPool:
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                pool = AsyncConnectionPool(
                    self._conninfo,
                    min_size=1,
                    max_size=WRITERS,
                    open=False,
                    kwargs={"autocommit": True, "connect_timeout": 5},
                )
                await pool.open(wait=False)
                self._pool = pool
            return self._pool

    async def _write(self) -> None:
        while self._waiting:
            await self._settle(self._take())

    async def _settle(self, batch: list[Waiting]) -> None:
        """Insert the batch's rows and give each waiting request its answer."""
        try:
            ids = await self._insert([row for row, _ in batch])
        except psycopg.DataError:  # a row the database refuses: each alone, so it fails only itself
            for item in batch:
                await self._settle([item])
            return
        except Exception as exc:
            for _, answer in batch:
                if not answer.done():  # done: its request was cancelled
                    answer.set_exception(exc)
            return
        for (_, answer), event_id in zip(batch, ids, strict=True):
            if not answer.done():
                answer.set_result(event_id)

    def _take(self) -> list[Waiting]:
        """The waiting rows for one INSERT: at most MAX_ROWS, no two with the same key, so each
        row the INSERT returns answers exactly one request (the second of a pair waits for the
        next INSERT, which finds it a duplicate)."""
        batch: list[Waiting] = []
        rest: list[Waiting] = []
        keys: set[tuple[Any, ...]] = set()
        for item in self._waiting:
            key = _key(item[0])
            if len(batch) < MAX_ROWS and key not in keys:
                keys.add(key)
                batch.append(item)
            else:
                rest.append(item)
        self._waiting = rest
        return batch

    async def _insert(self, rows: list[dict[str, Any]]) -> list[int | None]:
        params = [
            Jsonb(row[column]) if column == "payload" else row[column]
            for row in rows
            for column in ingress_db.EVENT_COLUMNS
        ]
        try:
            pool = await self._open()
            async with pool.connection(timeout=POOL_WAIT_SECONDS) as connection:
                cursor = await connection.execute(ingress_db.insert_events_sql(len(rows)), params)
                stored = {(s, d, h): int(i) for i, s, d, h in await cursor.fetchall()}
        except psycopg.DataError as exc:
            if len(rows) > 1:
                raise
            reason = str(exc).splitlines()[0]
            raise InvalidInputError(
                f"the delivery holds a value the database cannot store ({reason}); nothing "
                "was stored"
            ) from exc
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise DatabaseUnavailableError(
                f"the database at {self._where} did not take the delivery ({exc}); nothing was "
                "stored: redeliver it once the database is back"
            ) from exc
        return [stored.get(_key(row)) for row in rows]


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["source"], row["delivery_id"], row["body_hash"]
