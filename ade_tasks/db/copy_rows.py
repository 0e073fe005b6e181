"""Inserting many rows at once: PostgreSQL's `COPY ... FROM STDIN` where the driver is
psycopg, batched multi-row executes elsewhere (SQLite).

A sync of 100,000 new rules writes 200,000 rows (each rule and its first history entry, with its
document). Measured on the 2-core development machine (2026-12-02): psycopg's pipelined
executemany spent about 150 µs a row in the client; COPY streams the rows as text in one
statement, which is what the first sync's database part spends its time on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection as PsycopgConnection
from psycopg.sql import SQL, Identifier
from psycopg.types.json import Jsonb
from sqlalchemy import JSON, Table
from sqlalchemy.orm import Session

from ade_tasks.db.rules import in_batches


def insert_rows(session: Session, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert `rows` (dicts with the same keys, values as the table's columns take them)."""
    if not rows:
        return
    connection = session.connection()
    driver = connection.connection.dbapi_connection
    if not isinstance(driver, PsycopgConnection):
        for batch in in_batches(rows):
            session.execute(table.insert(), batch)
        return
    names = list(rows[0])
    documents = {name for name in names if isinstance(table.c[name].type, JSON)}
    statement = SQL("COPY {} ({}) FROM STDIN").format(
        Identifier(table.name), SQL(", ").join(map(Identifier, names))
    )
    with driver.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row([Jsonb(row[name]) if name in documents else row[name] for name in names])
