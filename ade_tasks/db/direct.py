"""The run path's prepared statements sent by the driver itself, without an ORM `Session`.

Each run makes three durable writes (the run row, the claim, the outcome), one autocommit
statement each. Through an autocommit `Session` a run's three cost 1.19-1.27 ms of client CPU
(the session's transaction, a pool checkout that sets and resets AUTOCOMMIT, the execution
context, bind processing, the result's metadata); sent by psycopg on a connection from the same
pool, 0.41-0.52 ms (docs/performance.md, 2026-12-02), and they are the same statements: the same
SQL text, the same parameters converted by the same SQLAlchemy types, one round trip and one
commit each. An engine with cursor-execute listeners keeps SQLAlchemy's path (`_observed`).

Only on PostgreSQL with psycopg (`direct_statements` gives None otherwise, and SQLite keeps the
session path); only for the `TextClause` statements of `ade_tasks.db.prepared`, whose results
are text, numbers and JSON, which psycopg decodes as SQLAlchemy would. A driver error becomes
the `sqlalchemy.exc.DBAPIError` the session would have raised, with `connection_invalidated`
set when the connection died, so `ade_tasks.db.retry` repeats the work on a fresh connection.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from psycopg.pq import ExecStatus
from sqlalchemy import Engine, TextClause, TextualSelect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from ade_tasks.db.engine import autocommit
from ade_tasks.db.retry import UnitsOfWork
from ade_tasks.json_document import JsonObject

#: The statements of `ade_tasks.db.prepared` (text, or text with its result columns typed).
Prepared = TextClause | TextualSelect


@dataclass(frozen=True)
class _Compiled:
    """A statement in the driver's parameter style, with each parameter's bind conversion."""

    sql: str
    convert: tuple[tuple[str, Callable[[Any], Any]], ...]

    def parameters(self, params: Mapping[str, Any]) -> JsonObject:
        values = dict(params)
        for name, convert in self.convert:
            if name in values:
                values[name] = convert(values[name])
        return values


class Rows:
    """The rows a direct statement returned, read like a SQLAlchemy result."""

    def __init__(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self._rows = rows

    def first(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def scalar_one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise ValueError(f"a statement returned {len(self._rows)} rows where one was expected")
        return self._rows[0][0] if self._rows else None


class Direct:
    """Prepared statements on PostgreSQL, each one committing on its own on a pooled connection.

    Used where an autocommit session would be (`begin()` makes it a unit of work for
    `ade_tasks.db.retry`); thread-safe, as the engine's pool is."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._compiled: dict[int, tuple[Prepared, _Compiled]] = {}

    def get_bind(self) -> Engine:
        return self._engine

    @contextlib.contextmanager
    def begin(self) -> Iterator[Direct]:
        """A unit of work whose statements commit one by one, as in an autocommit session."""
        yield self

    def execute(self, statement: Prepared, params: Mapping[str, Any]) -> Rows:
        """Run one statement in autocommit mode; its rows (none unless it has RETURNING)."""
        events = self._engine.dispatch
        if events.before_cursor_execute or events.after_cursor_execute:
            return self._observed(statement, params)
        compiled = self._compile(statement)
        values = compiled.parameters(params)
        pooled = self._engine.raw_connection()
        connection: Any = pooled.driver_connection
        try:
            connection.autocommit = True
            try:
                cursor = connection.execute(compiled.sql, values)
                result = cursor.pgresult  # (its `description` would build column objects)
                returned = result is not None and result.status == ExecStatus.TUPLES_OK
                rows = cursor.fetchall() if returned else []
            finally:
                if not connection.closed:  # a dead one is discarded; its error is the news
                    connection.autocommit = False  # as the pool hands connections out
        except self._engine.dialect.loaded_dbapi.Error as exc:
            dialect = self._engine.dialect
            lost = dialect.is_disconnect(exc, pooled.dbapi_connection, None)
            if lost:
                # As SQLAlchemy does: every connection of this pool's generation is suspect
                # (a restart kills them all), so the next checkout opens a fresh one.
                self._engine.pool._invalidate(pooled, exc)
            raise DBAPIError.instance(
                compiled.sql, values, exc, dialect.loaded_dbapi.Error,
                connection_invalidated=lost, dialect=dialect,
            ) from exc  # fmt: skip
        finally:
            pooled.close()  # back to the pool (or discarded, when invalidated)
        return Rows(rows)

    def _observed(self, statement: Prepared, params: Mapping[str, Any]) -> Rows:
        """The statement through SQLAlchemy, for an engine someone listens to (tracing
        instrumentation, a test counting statements): they see every statement, as before."""
        engine = self._engine.execution_options(isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            result = connection.execute(statement, dict(params))
            return Rows([tuple(row) for row in result] if result.returns_rows else [])

    def _compile(self, statement: Prepared) -> _Compiled:
        known = self._compiled.get(id(statement))
        if known is not None and known[0] is statement:
            return known[1]
        dialect = self._engine.dialect
        compiled = statement.compile(dialect=dialect)
        if compiled.escaped_bind_names:  # the SQL would name some parameters differently
            raise ValueError(f"parameter names must be plain identifiers: {statement}")
        convert = []
        for name, bind in compiled.binds.items():
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                convert.append((name, process))
        result = _Compiled(compiled.string, tuple(convert))
        with self._lock:
            self._compiled[id(statement)] = (statement, result)
        return result


#: Where a statement of the run path may run: a session, or the direct path.
Statements = Session | Direct


@lru_cache(maxsize=64)
def direct_statements(session_factory: sessionmaker[Session]) -> Direct | None:
    """The direct path for this factory's database: PostgreSQL through psycopg only."""
    engine = session_factory.kw["bind"]
    if engine.dialect.name != "postgresql" or engine.dialect.driver != "psycopg":
        return None
    return Direct(engine)


def durable_writes(session_factory: sessionmaker[Session]) -> UnitsOfWork[Statements]:
    """Where the run path's one-statement writes go (the claim, a step's record, the outcome):
    the direct path on PostgreSQL, autocommit sessions elsewhere."""
    return direct_statements(session_factory) or autocommit(session_factory)
