"""Prepared statements: SQL text with typed parameters, for the run path's hottest statements.

The same statements built with the SQL expression language cost about 0.6 ms more client CPU
each (building, then cache-keying every call), and a run makes three to four of them. The SQL is
kept portable between PostgreSQL and SQLite (>= 3.35), but for the batches sent as arrays
(`unnest_arrays`, PostgreSQL only; SQLite keeps multi-row statements).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.types.array import ListBinaryDumper
from sqlalchemy import JSON, ColumnElement, Table, TextClause, TypeDecorator, any_, bindparam, text
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import InstrumentedAttribute


def prepared(sql: str, table: Table, *columns: str, **types: Any) -> TextClause:
    """A text statement whose parameters named like `table`'s columns get those columns' types
    (and the others the `types` given), so values convert as the ORM would convert them."""
    params = [bindparam(c, type_=table.c[c].type) for c in columns]
    params += [bindparam(name, type_=type_) for name, type_ in types.items()]
    return text(sql).bindparams(*params)


# --- a batch as one array per column (PostgreSQL) -----------------------------------------------
#
# A multi-row `VALUES (...), (...)` statement of a 200-row batch is thousands of parameters:
# psycopg parses the text of each such statement on the client, uncached because it is long
# (about 27 ms a statement under the profiler, the largest item of a beat firing a boundary).
# The same batch as one array per column is a short statement with one parameter a column,
# parsed once per process, and PostgreSQL expands it with `unnest`. Each array goes in binary
# (`BinaryArray`).


def unnest_arrays(table: Table, columns: Sequence[str], dialect: Dialect) -> str:
    """`unnest(CAST(:c AS <column type>[]), ...)` over `columns` of `table`: the rows of a
    batch passed as `column_arrays`, one parameter a column."""
    casts = [f"CAST(:{c} AS {table.c[c].type.compile(dialect=dialect)}[])" for c in columns]
    return f"unnest({', '.join(casts)})"


class BinaryArray(list[Any]):
    """A list that psycopg sends as a binary array.

    A plain list goes as a text array, which psycopg builds in Python, quoting and escaping
    every element: 6.6-10.7 ms for the 18 columns of a 200-run batch, the largest single item
    of a beat firing a boundary (a tenth of its CPU). The binary form packs each element with
    its C dumper: 0.9 ms for the same batch. The SQL casts each array to its column's type
    either way, so the values and the statements are the same."""


psycopg.adapters.register_dumper(BinaryArray, ListBinaryDumper)


def one_of(
    column: ColumnElement[Any] | InstrumentedAttribute[Any], values: Sequence[Any], dialect: Dialect
) -> ColumnElement[bool]:
    """`column IN values` for a batch: on PostgreSQL `column = ANY(array)` with the values as
    one binary array parameter. An IN of 500 values is a long statement text that psycopg
    parses anew on every call; the ANY form is short, the same text every time."""
    if dialect.name == "postgresql":
        return column == any_(bindparam(None, BinaryArray(values)))
    return column.in_(list(values))


def column_arrays(
    table: Table, rows: Sequence[Mapping[str, Any]], columns: Sequence[str], dialect: Dialect
) -> dict[str, BinaryArray]:
    """The rows as one list per column, each value converted as its column's type converts a
    parameter (JSON documents serialized, timestamps refused when naive and made UTC)."""
    arrays: dict[str, BinaryArray] = {}
    for column in columns:
        values = [row[column] for row in rows]
        type_ = table.c[column].type
        if isinstance(type_, JSON):
            values = [None if v is None else json.dumps(v) for v in values]
        elif isinstance(type_, TypeDecorator):
            values = [type_.process_bind_param(v, dialect) for v in values]
        arrays[column] = BinaryArray(values)
    return arrays
