"""Engines and session factories for PostgreSQL (psycopg 3) and the embedded SQLite file."""

from __future__ import annotations

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
    kwargs.setdefault("pool_pre_ping", True)
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
