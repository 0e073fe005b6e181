"""A loopback HTTP server for tests that records every request and serves a queue of faults.

`ScriptedHttpServer` listens on 127.0.0.1 on a free port in a thread; a subclass says what a
request normally gets (`answer`). Faults queued with `fail_next` / `delay_next` are served, one
per matching request, before that normal answer, so a test scripts "500, then success" in one
line. `tests.fake_http.ScriptedServer` (GitHub's REST API, a notify webhook) is the main one.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

#: Where GitHub's error bodies point; the fault queue's errors look like GitHub's.
DOCS = "https://docs.github.com/rest"


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it (header names lower-cased)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    json: Any


@dataclass(frozen=True)
class Fault:
    """A scripted answer served instead of (status set) or before (delay only) normal handling."""

    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    delay: float = 0.0
    method: str | None = None
    path_prefix: str = ""

    def matches(self, request: RecordedRequest) -> bool:
        """True when this fault targets `request` (no method: any request)."""
        return (self.method is None or self.method == request.method) and request.path.startswith(
            self.path_prefix
        )


class ScriptedHttpServer:
    """A threaded loopback HTTP server with a request log and a fault queue; `answer` is the rest."""

    #: The request handler class (None: `_Handler`); a subclass may serve more than JSON.
    handler_class: type[BaseHTTPRequestHandler] | None = None

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self.faults: list[Fault] = []
        self._closing = threading.Event()
        self._httpd = _Httpd(("127.0.0.1", 0), self.handler_class or _Handler)
        self._httpd.scripted = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The base URL, e.g. http://127.0.0.1:PORT (a webhook's is `url + "/hooks/T/B/x"`)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()  # cut scripted delays short
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- scripting ------------------------------------------------------------------------------

    def fail_next(
        self,
        status: int = 500,
        *,
        headers: Mapping[str, str] | None = None,
        message: str | None = None,
        times: int = 1,
        method: str | None = None,
        path_prefix: str = "",
    ) -> None:
        """Answer the next `times` matching requests with `status` and a GitHub-style error body
        (a webhook-style server answers the same JSON; clients treat it as text)."""
        body = {"message": message or _reason(status), "documentation_url": DOCS}
        fault = Fault(status, dict(headers or {}), body, method=method, path_prefix=path_prefix)
        with self.lock:
            self.faults.extend(fault for _ in range(times))

    def delay_next(
        self, seconds: float, *, times: int = 1, method: str | None = None, path_prefix: str = ""
    ) -> None:
        """Handle the next `times` matching requests normally but answer them `seconds` late: a
        client that timed out has still changed the server's state, as with real GitHub."""
        fault = Fault(delay=seconds, method=method, path_prefix=path_prefix)
        with self.lock:
            self.faults.extend(fault for _ in range(times))

    def requests_to(self, method: str, path_prefix: str = "") -> list[RecordedRequest]:
        """Recorded requests with `method` whose path starts with `path_prefix`."""
        with self.lock:
            return [
                r for r in self.requests if r.method == method and r.path.startswith(path_prefix)
            ]

    # -- request handling (called by the handler thread) ----------------------------------------

    def answer(self, request: RecordedRequest) -> tuple[int, dict[str, str], Any]:
        """The normal answer to `request` (status, headers, JSON or text body), under `lock`."""
        raise NotImplementedError

    def handle(self, request: RecordedRequest) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            self.requests.append(request)
            fault = next((f for f in self.faults if f.matches(request)), None)
            if fault is not None:
                self.faults.remove(fault)
        if fault is not None and fault.status is not None:
            reply = fault.status, dict(fault.headers), fault.body
        else:
            with self.lock:
                reply = self.answer(request)
        if fault is not None and fault.delay:
            self._closing.wait(fault.delay)
        return reply


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


class _Httpd(ThreadingHTTPServer):
    scripted: ScriptedHttpServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out closed its end while a delayed answer was pending: expected.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Httpd

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        split = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw.decode("utf-8", "replace")
        request = RecordedRequest(
            method=self.command,
            path=split.path,
            query=parse_qs(split.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            json=payload,
        )
        status, headers, body = self.server.scripted.handle(request)
        if isinstance(body, str):
            data, content_type = body.encode(), "text/plain; charset=utf-8"
        else:
            data, content_type = json.dumps(body).encode(), "application/json; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve
