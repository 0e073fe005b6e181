"""A scripted model server for provider tests: replays recorded answers on 127.0.0.1.

Each POST gets the next scripted `Reply` (status, headers, a JSON body or raw text, an optional
delay to simulate a hang, or a gate the test opens) and is recorded (path, headers, JSON body, arrival time).

    with ScriptedModelServer() as server:
        server.script(Reply(status=500, body={}), Reply(body=load_fixture("openai", "...")))
        provider = OpenAIProvider(base_url=server.url)
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "agents"
# Headers a recording carries that describe the original connection, not the body we send.
_HOP = {"content-length", "content-type", "connection", "transfer-encoding", "content-encoding"}


def load_fixture(provider: str, name: str) -> Any:
    """A copied wire-format fixture (tests/fixtures/agents/<provider>/<name>), parsed."""
    return json.loads((FIXTURES / provider / name).read_text(encoding="utf-8"))


def fixture_text(provider: str, name: str) -> str:
    """A copied wire-format fixture as text."""
    return (FIXTURES / provider / name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a JSON `body`, or `raw` text sent as-is with a JSON content type."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    raw: str | None = None
    delay: float = 0.0
    #: An event the server waits for (at most 60 s) before it answers: the test holds the
    #: reply until it has made something happen meanwhile, then sets it.
    gate: threading.Event | None = field(default=None, compare=False)

    @classmethod
    def recorded(cls, response: Mapping[str, Any], **headers: str) -> Reply:
        """A recorded `{"status_code", "headers", "body"}` response, plus extra `headers`."""
        kept = {k: v for k, v in response.get("headers", {}).items() if k.lower() not in _HOP}
        return cls(
            status=response["status_code"], headers={**kept, **headers}, body=response["body"]
        )


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it (header names lower-cased)."""

    path: str
    headers: dict[str, str]
    json: Any
    at: float


class ScriptedModelServer:
    """A threaded loopback HTTP server answering each POST with the next scripted reply."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.replies: list[Reply] = []
        self.requests: list[RecordedRequest] = []
        self.closing = threading.Event()
        self._httpd = _Httpd(("127.0.0.1", 0), _Handler)
        self._httpd.scripted = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        """The base URL, e.g. http://127.0.0.1:54321."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, *replies: Reply) -> None:
        """Queue `replies`, served one per request in order."""
        with self.lock:
            self.replies.extend(replies)

    def __enter__(self) -> ScriptedModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Wakes handlers still sleeping in a scripted delay so shutdown does not wait them out.
        self.closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def next_reply(self, request: RecordedRequest) -> Reply:
        with self.lock:
            self.requests.append(request)
            if self.replies:
                return self.replies.pop(0)
        return Reply(status=599, raw=f"ScriptedModelServer: no reply scripted for {request.path}")


class _Httpd(ThreadingHTTPServer):
    scripted: ScriptedModelServer
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out closed its end while a delayed answer was pending: expected.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Httpd

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw.decode("utf-8", "replace")
        request = RecordedRequest(
            path=urlsplit(self.path).path,
            headers={k.lower(): v for k, v in self.headers.items()},
            json=payload,
            at=time.monotonic(),
        )
        scripted = self.server.scripted
        reply = scripted.next_reply(request)
        if reply.delay and scripted.closing.wait(reply.delay):
            return
        if reply.gate is not None:
            reply.gate.wait(60)
        data = (reply.raw if reply.raw is not None else json.dumps(reply.body)).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    # A GET (a key check listing the models) is answered from the same script.
    do_GET = do_POST
