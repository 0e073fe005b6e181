"""What the API answers when the database fails under a request: never a 500, never plain text.

A PostgreSQL restart, a failover or `pg_terminate_backend` kills every pooled connection at
once, and the engine has no pre-ping (see `ade_tasks.db.engine`), so the next statement on each
fails (`ade_tasks.db.retry.is_connection_lost`). SQLAlchemy then drops the whole pool, so the
same work run again gets a fresh connection. `DatabaseFaultMiddleware`, in front of auth, does
that for every request that is safe to run again:

- a read (GET, HEAD, OPTIONS: no route changes state on them, see `ade_api.http.auth`);
- any request whose failure came before it reached a route (the token lookup in front of every
  route): nothing of it ran, and its body is replayed as it was received.

It tries `ATTEMPTS` times with `BACKOFF` pauses, as `ade_tasks.db.retry` does. Writes that a key
makes safe to repeat retry inside their route (manual runs and retries:
`ade_tasks.runs.dispatch.dispatch_retrying`). Anything else that met a lost connection, an
unexpected OperationalError (a statement timeout, a serialization failure) or a pool with no
connection to spare is answered 503 with `Retry-After`, as problem+json, or under `/ui` as the web
page's own readable page, saying what to do. The reason is logged in full; the answer names only its
kind (the database's message can name hosts, and a request that failed at the token lookup is not
authenticated yet). A response already under way cannot be taken back: that error is raised.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ade_api.http.auth import SAFE_METHODS
from ade_api.http.problems import RETRY_AFTER_SECONDS, problem
from ade_api.http.web.pages import error_page
from ade_tasks.db.retry import ATTEMPTS, BACKOFF, DatabaseFault, database_fault
from ade_tasks.errors import DatabaseUnavailableError

log = logging.getLogger(__name__)

#: The scope key under which a request's attempt records how far it got.
PROGRESS = "ade.db_faults.progress"
TITLE = "Database Unavailable"


@dataclass
class _Progress:
    """How far one attempt of a request got: past the middlewares, and into its answer."""

    reached_routes: bool = False
    answering: bool = False


def _detail(fault: DatabaseFault, method: str) -> str:
    wait = f"try again in {RETRY_AFTER_SECONDS} seconds (Retry-After)"
    if method in SAFE_METHODS:
        return f"the database did not answer ({fault.kind}); {wait}"
    return (
        f"the database did not answer ({fault.kind}), so this request may not have taken "
        f"effect; {wait}. Sent again with the same key (the Idempotency-Key of a manual run "
        "or retry, a webhook's delivery id), it never starts a second run"
    )


class _Replay:
    """The request's body as it was received, for another attempt of the request."""

    def __init__(self, receive: Receive, *, read: bool) -> None:
        self._receive = receive
        self._read = read
        self._messages: list[Message] = []
        self._position = 0
        self.progress = _Progress()  # the current attempt's

    async def receive(self) -> Message:
        if self._position < len(self._messages):
            self._position += 1
            return self._messages[self._position - 1]
        message = await self._receive()
        # A write that reached its route never runs again: no need to keep its body.
        keep = self._read or not self.progress.reached_routes
        if keep and message["type"] == "http.request":
            self._messages.append(message)
            self._position += 1
        return message

    def rewind(self) -> None:
        self._position = 0


class RoutesReached:
    """The innermost middleware: marks an attempt that got past every middleware in front of
    the routes (add it before the others)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        progress = scope.get(PROGRESS)
        if progress is not None:
            progress.reached_routes = True
        await self.app(scope, receive, send)


class DatabaseFaultMiddleware:
    """Runs a request again when that is safe and its database connection died; otherwise
    answers a database fault with 503 and `Retry-After` (add it after the middlewares that
    touch the database, so it wraps them)."""

    def __init__(self, app: ASGIApp, *, attempts: int = ATTEMPTS) -> None:
        self.app = app
        self.attempts = attempts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method: str = scope["method"]
        replay = _Replay(receive, read=method in SAFE_METHODS)
        for attempt in range(self.attempts):
            progress = replay.progress = _Progress()
            attempt_scope = {**scope, PROGRESS: progress}
            if "state" in scope:  # a fresh request.state each attempt
                attempt_scope["state"] = dict(scope["state"])

            async def answering(message: Message, progress: _Progress = progress) -> None:
                progress.answering = True
                await send(message)

            try:
                await self.app(attempt_scope, replay.receive, answering)
                return
            except Exception as exc:
                fault = database_fault(exc)
                if fault is None or progress.answering:
                    raise
                again = method in SAFE_METHODS or not progress.reached_routes
                if fault.lost and again and attempt + 1 < self.attempts:
                    pause = BACKOFF[min(attempt, len(BACKOFF) - 1)]
                    log.warning(
                        "%s %s lost its database connection (%s); running it again in %.2fs",
                        method, scope["path"], fault.reason, pause,
                    )  # fmt: skip
                    replay.rewind()
                    await asyncio.sleep(pause)
                    continue
                log.warning(
                    "%s %s: answered 503, the database failed: %s", method, scope["path"],
                    fault.reason,
                )  # fmt: skip
                await _unavailable(attempt_scope, replay.receive, send, _detail(fault, method))
                return


async def _unavailable(scope: Scope, receive: Receive, send: Send, detail: str) -> None:
    """The 503: the web page's own error page under /ui, problem+json everywhere else."""
    if scope["path"].startswith("/ui") and not scope["path"].startswith("/ui/static/"):
        page = error_page(Request(scope, receive), DatabaseUnavailableError(detail))
        await page(scope, receive, send)
        return
    await problem(503, TITLE, detail)(scope, receive, send)
