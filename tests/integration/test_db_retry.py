"""A unit of work survives its connection being terminated (`pg_terminate_backend`) under it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.retry import is_connection_lost, retrying
from ade_tasks.errors import DatabaseUnavailableError
from tests.integration.conftest import _admin_execute


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_db_engine(database_url, pool_size=1, max_overflow=0)
    yield engine
    engine.dispose()


def _terminate_pooled(engine: Engine) -> None:
    """Open the pool's one connection, then kill its backend from an admin connection."""
    with engine.connect() as connection:
        pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
    _admin_execute(f"SELECT pg_terminate_backend({pid})")


def test_a_terminated_connection_fails_a_plain_statement(engine: Engine) -> None:
    # Given the pool's only connection was terminated by the server
    _terminate_pooled(engine)
    # When a statement runs on it without a retry, then it fails as a lost connection
    sessions = create_session_factory(engine)
    with pytest.raises(DBAPIError) as raised, sessions.begin() as session:
        session.execute(text("SELECT 1"))
    assert is_connection_lost(raised.value)


def test_retrying_runs_the_work_again_on_a_fresh_connection(engine: Engine) -> None:
    _terminate_pooled(engine)
    sessions = create_session_factory(engine)
    calls: list[int] = []

    def work(session) -> int:  # type: ignore[no-untyped-def]
        calls.append(1)
        return int(session.execute(text("SELECT 41 + 1")).scalar_one())

    assert retrying(sessions, work) == 42
    assert len(calls) == 2  # the first attempt met the dead connection


def test_an_error_of_the_statement_itself_is_not_retried(engine: Engine) -> None:
    sessions = create_session_factory(engine)
    calls: list[int] = []

    def work(session) -> None:  # type: ignore[no-untyped-def]
        calls.append(1)
        session.execute(text("SELECT * FROM no_such_table"))

    with pytest.raises(DBAPIError) as raised:
        retrying(sessions, work)
    assert not is_connection_lost(raised.value)
    assert len(calls) == 1


def test_a_database_that_stays_away_gives_a_clear_error() -> None:
    # A port nothing listens on (loopback): every attempt fails to connect.
    engine = create_db_engine("postgresql://postgres@127.0.0.1:1/nothing")
    sessions = create_session_factory(engine)
    with pytest.raises(DatabaseUnavailableError) as raised:
        retrying(sessions, lambda session: session.execute(text("SELECT 1")), attempts=2)
    assert "try again in a few seconds" in raised.value.message
    engine.dispose()
