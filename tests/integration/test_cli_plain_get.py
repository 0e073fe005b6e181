"""`Api.get` (the standard library's GET that `runs list` sends, ade_api/cli/plain_http.py)
answers exactly as `Api.call("GET", ...)` (httpx) does: the same JSON, the same request (query,
token), and the same one-line error and exit code for an unreachable API, 401 with and without
a token, 403, 404 and an answer that is not JSON. Against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ade_api.cli.root import Api
from ade_tasks.api_address import ApiAddress
from tests.support import free_port

#: What the server answers, by path: (status, content type, body).
ANSWERS = {
    "/api/v1/runs": (200, "application/json", None),  # echoes the request
    "/denied": (401, "application/json", json.dumps({"detail": "invalid or revoked token"})),
    "/forbidden": (403, "application/json", json.dumps({"detail": "needs the operator role"})),
    "/missing": (404, "application/json", json.dumps({"detail": "run 'x' does not exist"})),
    "/broken": (502, "text/plain", "bad gateway\n"),
}


class Answering(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        status, kind, body = ANSWERS[path]
        if body is None:
            body = json.dumps({"query": query, "authorization": self.headers["Authorization"],
                               "items": [{"id": "é"}], "next_cursor": None})  # fmt: skip
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:  # quiet
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answering)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        thread.join(timeout=10)


def outcome(ask: Callable[[], Any], capsys: pytest.CaptureFixture[str]) -> tuple[Any, str]:
    """What `ask` returned, or the exit code it exited with, and what it printed to stderr."""
    try:
        result = ask()
    except SystemExit as exit_:
        result = ("exit", exit_.code)
    return result, capsys.readouterr().err


def address(url: str, token: str | None) -> ApiAddress:
    return ApiAddress(url, token, Path("/nonexistent/.ade/api-token"))


@pytest.mark.parametrize(
    ("path", "token"),
    [("/api/v1/runs", "s3cret"), ("/api/v1/runs", None), ("/denied", "s3cret"),
     ("/denied", None), ("/forbidden", "s3cret"), ("/missing", "s3cret"), ("/broken", "s3cret")],
    ids=["ok", "ok without a token", "401", "401 without a token", "403", "404", "not JSON"],
)  # fmt: skip
def test_a_plain_get_answers_as_the_httpx_call_does(
    server: str, path: str, token: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    params = {"rule": "nightly tests/ü", "limit": 20}
    api = Api(address(server, token), None)

    plain = outcome(lambda: api.get(path, params), capsys)
    httpx_call = outcome(lambda: api.call("GET", path, params=params), capsys)

    assert plain == httpx_call
    if path == "/api/v1/runs":  # the same request reached the server
        assert plain[0]["query"] == "rule=nightly+tests%2F%C3%BC&limit=20"
        assert plain[0]["authorization"] == (f"Bearer {token}" if token else None)
    else:
        assert plain[0] == ("exit", 2 if path == "/denied" else 1)
        assert plain[1].startswith("error: ") and plain[1].count("\n") == 1


def test_an_unreachable_api_is_the_same_error(capsys: pytest.CaptureFixture[str]) -> None:
    api = Api(address(f"http://127.0.0.1:{free_port()}", "s3cret"), None)

    plain = outcome(lambda: api.get("/api/v1/runs", {}), capsys)
    httpx_call = outcome(lambda: api.call("GET", "/api/v1/runs"), capsys)

    assert plain == httpx_call
    assert plain[0] == ("exit", 1)
    assert "cannot reach the ADE API at http://127.0.0.1:" in plain[1]
    assert "Connection refused" in plain[1]
