"""Retry a unit of work on a fresh connection when its connection died under it.

A PostgreSQL restart, a failover or `pg_terminate_backend` kills every pooled connection at once;
the engine has no pre-ping (see `engine.create_db_engine`), so the next statement on each of them
fails. SQLAlchemy then invalidates the connection (`DBAPIError.connection_invalidated`) and the
pool hands out a new one, so running the same unit of work again is enough, provided the work is
safe to repeat. Everything retried here is: the run path's writes are conditional on the run's
state and worker (a repeated claim, step record or finish changes nothing the first did), and
inserts are keyed by run id or idempotency key. A statement whose COMMIT was lost in flight may
have taken effect; its retry then finds nothing to do, which the callers already treat as "not
ours any more" or "already there".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from ade_tasks.errors import DatabaseUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)


class UnitsOfWork(Protocol[S_co]):
    """What hands out units of work: a `sessionmaker`, or `db.direct.Direct` (statements that
    commit one by one)."""

    def begin(self) -> AbstractContextManager[S_co]: ...


#: How often a unit of work is tried, and the pause before each retry (seconds).
ATTEMPTS = 4
BACKOFF = (0.05, 0.25, 1.0)

# SQLSTATE classes of a dead or refused connection: 08 connection exception, 57P01 admin
# shutdown (pg_terminate_backend), 57P02 crash shutdown, 57P03 cannot connect now (starting up).
_CONNECTION_STATES = ("08", "57P01", "57P02", "57P03")


def is_connection_lost(exc: BaseException) -> bool:
    """Did the statement fail because its connection died, rather than because of what it said?"""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    state = getattr(exc.orig, "sqlstate", None)
    if state is None:  # psycopg raises OperationalError without a SQLSTATE for a closed socket
        return type(exc.orig).__name__ == "OperationalError"
    return str(state).startswith(_CONNECTION_STATES)


@dataclass(frozen=True)
class DatabaseFault:
    """The database's failure behind an error, as the API answers it (503) and logs it."""

    lost: bool  # the connection died: another attempt gets a fresh one
    kind: str  # for the caller: the error's class, never its message (it can name hosts)
    reason: str  # for the log


def database_fault(exc: BaseException) -> DatabaseFault | None:
    """The database fault behind an error (also inside an exception group), or None: a lost
    connection, any other OperationalError (a lock or statement timeout, a serialization
    failure), a pool with no connection to spare, or DatabaseUnavailableError."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            fault = database_fault(inner)
            if fault is not None:
                return fault
        return None
    if isinstance(exc, DBAPIError) and (
        is_connection_lost(exc) or isinstance(exc, OperationalError)
    ):
        orig = exc.orig if exc.orig is not None else exc
        reason = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
        return DatabaseFault(is_connection_lost(exc), type(orig).__name__, reason)
    if isinstance(exc, PoolTimeoutError):
        return DatabaseFault(False, "no free database connection in time", str(exc).splitlines()[0])
    if isinstance(exc, DatabaseUnavailableError):
        return DatabaseFault(False, "database unavailable", exc.message)
    return None


def unavailable(exc: BaseException) -> DatabaseUnavailableError:
    """The error to report when the database stayed away through every retry."""
    reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
    return DatabaseUnavailableError(
        f"the database connection was lost and could not be restored ({reason}); "
        "check that the database is up, then try again in a few seconds"
    )


def retrying(
    sessions: UnitsOfWork[S],
    work: Callable[[S], T],
    *,
    what: str = "database write",
    attempts: int = ATTEMPTS,
) -> T:
    """Run `work(session)` in a transaction of its own; repeat it on a fresh connection when the
    connection died, up to `attempts` times. `work` must be safe to repeat.

    Raises DatabaseUnavailableError when every attempt lost its connection; any other database
    error is raised at once, as it would be raised again.
    """

    def attempt() -> T:
        with sessions.begin() as session:
            return work(session)

    return repeating(attempt, what=what, attempts=attempts)


def repeating(call: Callable[[], T], *, what: str, attempts: int = ATTEMPTS) -> T:
    """`call()`, called again when it failed because its database connection died, up to
    `attempts` times; for work that opens its own transactions (such as `dispatch`). `call`
    must be safe to repeat, including after a COMMIT that took effect but whose answer was lost.

    SQLAlchemy invalidates the whole pool when it sees a connection die, so the next attempt
    gets a fresh connection even when every pooled one was killed at once. Raises
    DatabaseUnavailableError when every attempt lost its connection; any other error is raised
    at once.
    """
    for attempt in range(attempts):
        try:
            return call()
        except DBAPIError as exc:
            if not is_connection_lost(exc):
                raise
            if attempt + 1 == attempts:
                raise unavailable(exc) from exc
            pause = BACKOFF[min(attempt, len(BACKOFF) - 1)]
            log.warning("%s lost its database connection; retrying in %.2fs", what, pause)
            time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover
