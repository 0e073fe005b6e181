"""Writes the API's ingress events to PostgreSQL, sharing INSERTs between requests.

The webhook routes await `EventWriter.record(row)`. Rows wait for a writer task; up to
`WRITERS` run at once, each on its own connection of an asyncio psycopg pool (autocommit),
taking every row that waits (at most `MAX_ROWS`) into one multi-row INSERT. Under load one
round trip and one commit serve many deliveries; a lone delivery is written at once. Each row
still gets its own answer: its event id, None for a duplicate, or its own error. A batch with a
row the database refuses, or whose INSERT deadlocked with another API process's (two batches
replaying each other's bodies), is written again row by row, so no row fails for another.
Every stored event goes to `on_stored`, even when its request was cancelled meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy.engine import make_url

from ade_tasks.db import ingress as ingress_db
from ade_tasks.errors import DatabaseUnavailableError, InvalidInputError

log = logging.getLogger(__name__)

#: Two writers keep the database busy while the rows for the next INSERT gather.
WRITERS = 2
MAX_ROWS = 50
POOL_WAIT_SECONDS = 5.0

EventKey = tuple[str, str | None, str | None]
"""What makes an ingress event a duplicate: (source, delivery id, body hash)."""
Waiting = tuple[dict[str, Any], "asyncio.Future[int | None]"]
#: Errors of one row, or of two INSERTs crossing each other (a deadlock, a serialization
#: failure): a batch that meets one is written again row by row.
RETRY_ALONE = (
    psycopg.DataError,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.TransactionRollback,
)


class EventWriter:
    """Event INSERTs shared between concurrent requests (see the module's docstring)."""

    def __init__(self, database_url: str, on_stored: Callable[[int], None]) -> None:
        """`on_stored(event_id)` is called for every event stored, even when the request that
        sent it was cancelled meanwhile (the ingress publisher hands it to the workers)."""
        url = make_url(database_url).set(drivername="postgresql")  # libpq's own URL
        self._conninfo = url.render_as_string(hide_password=False)
        self._where = url.render_as_string(hide_password=True)
        self._pool: AsyncConnectionPool | None = None  # opened in the first request's loop
        self._opening: asyncio.Lock | None = None
        self._on_stored = on_stored
        self._waiting: list[Waiting] = []
        self._writers: set[asyncio.Task[None]] = set()  # referenced until done
        self._writing = 0  # writers not yet past their last look at `_waiting`

    async def record(self, row: dict[str, Any]) -> int | None:
        """Store one `event_row`: its id, or None when its delivery id or body hash was seen."""
        answer: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._waiting.append((row, answer))
        if self._writing < WRITERS:
            self._writing += 1
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
        try:
            while self._waiting:
                await self._settle(self._take())
        finally:
            # In the same step as the last look at `_waiting` (a done-callback would run a step
            # later): a row added after it finds the count lowered and starts a writer.
            self._writing -= 1

    async def _settle(self, batch: list[Waiting]) -> None:
        """Insert the batch's rows and give each waiting request its answer."""
        try:
            ids = await self._insert([row for row, _ in batch])
        except RETRY_ALONE:  # a row the database refuses, or two INSERTs that deadlocked
            for item in batch:
                await self._settle([item])
            return
        except Exception as exc:
            for _, answer in batch:
                if not answer.done():  # done: its request was cancelled
                    answer.set_exception(exc)
            return
        for (_, answer), event_id in zip(batch, ids, strict=True):
            if event_id is not None:
                self._on_stored(event_id)
            if not answer.done():
                answer.set_result(event_id)

    def _take(self) -> list[Waiting]:
        """The waiting rows for one INSERT: at most MAX_ROWS, no two with the same key, so each
        row the INSERT returns answers exactly one request (the second of a pair waits for the
        next INSERT, which finds it a duplicate)."""
        batch: list[Waiting] = []
        rest: list[Waiting] = []
        keys: set[EventKey] = set()
        for item in self._waiting:
            key = _key(item[0])
            if len(batch) < MAX_ROWS and key not in keys:
                keys.add(key)
                batch.append(item)
            else:
                rest.append(item)
        self._waiting = rest
        # In one order, so that two INSERTs racing for the same delivery ids wait for each
        # other instead of deadlocking (body hashes can still cross: then RETRY_ALONE).
        batch.sort(key=lambda item: (item[0]["source"], item[0]["delivery_id"] or ""))
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
        except RETRY_ALONE as exc:
            if len(rows) > 1:
                raise
            reason = str(exc).splitlines()[0]
            if isinstance(exc, psycopg.DataError):
                raise InvalidInputError(
                    f"the delivery holds a value the database cannot store ({reason}); nothing "
                    "was stored"
                ) from exc
            raise DatabaseUnavailableError(
                f"the database gave up on the delivery ({reason}); nothing was stored: redeliver it"
            ) from exc
        except (psycopg.OperationalError, PoolTimeout) as exc:
            # The sender is told what happened and what to do, never where the database is:
            # the URL, and psycopg's message, which names the host and port, go to the log.
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.warning(
                "the database at %s did not take %d delivery row(s): %s",
                self._where,
                len(rows),
                reason,
            )
            raise DatabaseUnavailableError(
                f"the database did not take the delivery ({type(exc).__name__}); nothing was "
                "stored: redeliver it once the database is back"
            ) from exc
        return [stored.get(_key(row)) for row in rows]


def _key(row: dict[str, Any]) -> EventKey:
    return row["source"], row["delivery_id"], row["body_hash"]
