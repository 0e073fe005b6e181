"""DatabaseFaultMiddleware in process: which requests run again after a lost connection, and what
the others are answered (503 problem+json or the web page's page, with Retry-After)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError
from starlette.types import ASGIApp, Receive, Scope, Send

from ade_api.http.db_faults import DatabaseFaultMiddleware, RoutesReached
from ade_api.http.problems import RETRY_AFTER_SECONDS


class QueryCanceled(Exception):
    """What psycopg raises for a statement timeout: the statement's fault, not the connection's."""

    sqlstate = "57014"


def lost() -> OperationalError:
    return OperationalError("SELECT 1", {}, Exception("server closed the connection"), False, True)


def timed_out() -> OperationalError:
    return OperationalError("SELECT 1", {}, QueryCanceled("canceling statement"), False, False)


class Route:
    """The app behind the middlewares: fails as told, else echoes the body it read."""

    def __init__(self, failures: list[BaseException], *, after_start: bool = False) -> None:
        self.failures = failures
        self.after_start = after_start
        self.calls = 0
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        body = b""
        more = scope["method"] != "GET"
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.bodies.append(body)
        headers = [(b"content-type", b"text/plain")]
        if self.failures and not self.after_start:
            raise self.failures.pop(0)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if self.failures:
            raise self.failures.pop(0)
        await send({"type": "http.response.body", "body": b"ok:" + body})


def in_front(failures: list[BaseException]) -> Callable[[ASGIApp], ASGIApp]:
    """A middleware in front of the routes (as auth is) that fails before passing a request on."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if failures:
                raise failures.pop(0)
            await app(scope, receive, send)

        return middleware

    return wrap


def client(route: Route, front: list[BaseException] | None = None) -> TestClient:
    inner: Any = RoutesReached(route)
    if front is not None:
        inner = in_front(front)(inner)
    app = DatabaseFaultMiddleware(inner)
    return TestClient(app, raise_server_exceptions=True)  # type: ignore[arg-type]


def test_a_read_whose_connection_died_runs_again() -> None:
    route = Route([lost()])
    response = client(route).get("/api/v1/rules")
    assert (response.status_code, response.text, route.calls) == (200, "ok:", 2)


def test_a_write_that_reached_its_route_is_not_run_again_and_gets_503() -> None:
    route = Route([lost()])
    response = client(route).post("/api/v1/runs/x/cancel", content=b"{}")
    assert route.calls == 1
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
    body = response.json()
    assert body["title"] == "Database Unavailable" and "may not have taken effect" in body["detail"]
    assert "server closed" not in body["detail"]  # the database's own words stay in the log


def test_a_write_that_failed_in_front_of_the_routes_runs_again_with_its_body() -> None:
    route = Route([])
    response = client(route, front=[lost()]).post("/api/v1/rules/hello/runs", content=b'{"a":1}')
    assert (response.status_code, response.text) == (200, 'ok:{"a":1}')
    assert route.bodies == [b'{"a":1}']


def test_a_read_that_keeps_failing_gets_503_after_the_attempts() -> None:
    route = Route([lost() for _ in range(10)])
    response = client(route).get("/api/v1/runs")
    assert response.status_code == 503 and route.calls == 4


def test_the_web_pages_get_a_readable_page() -> None:
    route = Route([lost() for _ in range(10)])
    response = client(route).get("/ui/runs")
    assert response.status_code == 503
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
    assert "Database Unavailable" in response.text and "try again" in response.text


def test_a_statement_error_is_not_retried_but_still_a_503() -> None:
    route = Route([timed_out()])
    response = client(route).get("/api/v1/runs")
    assert (response.status_code, route.calls) == (503, 1)
    assert "QueryCanceled" in response.json()["detail"]


def test_a_fault_after_the_answer_started_cannot_be_taken_back() -> None:
    route = Route([lost()], after_start=True)
    with pytest.raises(OperationalError):
        client(route).get("/api/v1/runs")
    assert route.calls == 1


def test_other_errors_pass_through() -> None:
    route = Route([RuntimeError("a bug")])
    with pytest.raises(RuntimeError):
        client(route).get("/api/v1/runs")
