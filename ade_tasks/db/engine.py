"""Engines and session factories for PostgreSQL (psycopg 3) and the embedded SQLite file."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

SessionFactory = sessionmaker[Session]


def normalize_url(url: str) -> str:
    """Use psycopg 3 for plain `postgresql://` URLs."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def create_db_engine(url: str, **kwargs: Any) -> Engine:
    """An engine tuned for the run path: pre-ping on PostgreSQL, WAL + busy timeout on SQLite."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin_immediate)
        return engine
    # No pre-ping (a round trip on every checkout, a third of a short run's queries); connections
    # are recycled instead, and a run whose connection died fails its transaction and is retried
    # by the recovery sweep like any other lost run.
    kwargs.setdefault("pool_recycle", 300)
    kwargs.setdefault("connect_args", {"connect_timeout": 5})
    return create_engine(url, **kwargs)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the API read while a worker thread writes; foreign keys are off by default in SQLite.
    dbapi_connection.isolation_level = None  # let SQLAlchemy's "begin" event issue BEGIN
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _sqlite_begin_immediate(connection: Any) -> None:
    # Take the write lock up front: a deferred transaction that later upgrades to a writer can
    # fail at once with "database is locked" when another thread wrote in between.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def create_session_factory(engine: Engine) -> SessionFactory:
    """Sessions that keep loaded values readable after commit."""
    return sessionmaker(engine, expire_on_commit=False)


@lru_cache(maxsize=64)
def autocommit(session_factory: SessionFactory) -> SessionFactory:
    """Sessions in which every statement commits on its own, with no BEGIN/COMMIT round trips.

    The run path changes state one atomic statement at a time (claim, step started, step
    finished, run finished), and a crash between two of them leaves a state the recovery sweep
    already handles, so it needs no multi-statement transactions; this halves its round trips.
    Use it as `with autocommit(factory).begin() as session:` (BEGIN/COMMIT are then no-ops).
    """
    engine = session_factory.kw["bind"]
    if engine.dialect.name == "sqlite":
        # SQLite has no round trips to save, and pysqlite's own implicit transactions make
        # its AUTOCOMMIT mode fragile; keep ordinary (BEGIN IMMEDIATE) transactions there.
        return session_factory
    return sessionmaker(
        engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False
    )
