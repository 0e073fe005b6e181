"""Inserting many rows at once: PostgreSQL's `COPY ... FROM STDIN` where the driver is
psycopg, batched multi-row executes elsewhere (SQLite).

A sync of 100,000 new rules writes 200,000 rows (each rule and its first history entry, with its
document). Measured on the 2-core development machine (2026-12-02): psycopg's pipelined
executemany spent about 150 µs a row in the client; COPY streams the rows as text in one
statement, which is what the first sync's database part spends its time on. Most of that was
serializing each document to JSON (twice: the rule and its history entry); a document whose
JSON text the caller has already (`JsonText`) is written as that text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from psycopg import Connection as PsycopgConnection
from psycopg.sql import SQL, Identifier
from psycopg.types.json import Jsonb
from sqlalchemy import JSON, Table
from sqlalchemy.orm import Session

from ade_tasks.db.rules import in_batches


class JsonText(str):
    """A JSON column's value given as its JSON text, not as the object it encodes."""

    __slots__ = ()


def insert_rows(session: Session, table: Table, rows: Sequence[Mapping[str, object]]) -> None:
    """Insert `rows` (dicts with the same keys, values as the table's columns take them)."""
    if not rows:
        return
    connection = session.connection()
    driver = connection.connection.dbapi_connection
    if not isinstance(driver, PsycopgConnection):
        rows = [_decoded(row) for row in rows]  # the JSON type encodes objects, not text
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
            copy.write_row([_copied(row[n]) if n in documents else row[n] for n in names])


def _copied(value: object) -> object:
    # COPY's text input of a jsonb column is JSON text, parsed by the server either way.
    return str(value) if isinstance(value, JsonText) else Jsonb(value)


def _decoded(row: Mapping[str, object]) -> dict[str, object]:
    return {name: json.loads(v) if isinstance(v, JsonText) else v for name, v in row.items()}
