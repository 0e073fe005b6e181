"""The model endpoint a CLI agent session talks to: a proxy on 127.0.0.1 that holds the real key.

A CLI agent (Claude Code, Codex) passes its whole environment to every command and tool it runs,
so a provider key in that environment is a key handed to every `bash` call of the model. Instead
the CLI gets the address of this proxy and a random per-session token; the proxy checks the
token, swaps in the provider's real key, forwards the request to the provider and streams the
answer back. The real key never enters the session's processes; the token is worth nothing once
the session ends.

Before forwarding, the engine's secrets are masked in the request body: a tool output holding
one (a command that printed the API token) never reaches the provider.

The proxy also meters: it reads the token usage of every answer (JSON, or the Server-Sent Events
of the Anthropic Messages and OpenAI Responses streams) and adds it up. When `meter` says the
session is over its budget, the proxy refuses every later call (HTTP 400, so no CLI retries) and
the meter stops the session. A call that was already streaming finishes, so a
session overshoots its budget by at most one answer.
"""

from __future__ import annotations

import functools
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

import httpx

from ade_tasks.secrets import Masker

Style = Literal["anthropic", "openai"]
Meter = Callable[[int, int], str | None]
"""Add (input_tokens, output_tokens) to the session's spend; the reason it is over, or None."""

#: Request headers never forwarded: the session's token and what describes this hop.
_DROPPED_REQUEST = frozenset(
    {"host", "authorization", "x-api-key", "content-length", "connection", "accept-encoding"}
)
_DROPPED_RESPONSE = frozenset(
    {"content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"}
)
SHUTDOWN_POLL = 0.02
#: The paths a session may call, by style: the model endpoints the CLIs use, nothing else of
#: the provider's API (batches, files, admin) that the key would also open.
ENDPOINTS: dict[str, tuple[str, ...]] = {
    "anthropic": ("/v1/messages", "/v1/messages/count_tokens"),
    "openai": ("/responses", "/responses/compact", "/models"),
}
UPSTREAM_TIMEOUT = httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=10.0)


@dataclass
class Spend:
    """What the session's model calls used so far, as the provider reported it."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    exhausted: str | None = None  # why later calls are refused


@functools.cache
def upstream_client() -> httpx.Client:
    """One HTTP client for every session's proxy in this process: building one loads the TLS
    trust store (~0.1 s), and a client is safe to share between threads."""
    return httpx.Client(timeout=UPSTREAM_TIMEOUT)


class ModelProxy:
    """One session's model endpoint; a context manager serving on a free loopback port."""

    def __init__(
        self,
        *,
        upstream: str,
        api_key: str | None,
        style: Style,
        meter: Meter,
        stopped: Callable[[], str | None] = lambda: None,
        on_refused: Callable[[str], None] = lambda reason: None,  # noqa: ARG005
        masker: Masker | None = None,
    ) -> None:
        self.token = f"ade-session-{secrets.token_urlsafe(24)}"
        self.spend = Spend()
        self._upstream = upstream.rstrip("/")
        origin = httpx.URL(self._upstream)
        self._origin = (origin.scheme, origin.host, origin.port)
        self._api_key = api_key
        self.style: Style = style
        self._meter = meter
        self._stopped = stopped
        self._on_refused = on_refused
        # The session's own token too: a command inside the sandbox can read it from the CLI's
        # /proc environ (same user, same PID namespace), but never show it to the model.
        self._masker = (masker or Masker.none()).with_values([self.token])
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        # A short poll: `shutdown()` waits for the serving loop to notice, and a session's
        # end should not wait half a second (the default) for it.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL},
            name="ade-model-proxy",
            daemon=True,
        )

    @property
    def url(self) -> str:
        """The base URL the CLI is given (the upstream's path prefix is kept on forwarding)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def port(self) -> int:
        """The proxy's port on 127.0.0.1 (a sandbox forwards the same port on its loopback)."""
        return int(self._server.server_address[1])

    def __enter__(self) -> ModelProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- used by the handler -----------------------------------------------------------

    def authorized(self, headers: dict[str, str]) -> bool:
        bearer = headers.get("authorization", "")
        offered = headers.get("x-api-key") or bearer.removeprefix("Bearer ").strip()
        return secrets.compare_digest(offered, self.token)

    def refusal(self) -> str | None:
        """Why calls are refused now: the budget is spent, or the engine is stopping the
        session (a call parked for approval), so the CLI cannot race the stop."""
        with self._lock:
            return self.spend.exhausted or self._stopped()

    def outgoing(self, body: bytes) -> bytes:
        """The request body as the provider gets it: the engine's secrets and the session's
        token masked, so a tool that printed one (a `cat` of the token file, of the CLI's
        environment) never sends it to the model."""
        return self._masker.mask(body.decode("utf-8", "surrogateescape")).encode(
            "utf-8", "surrogateescape"
        )

    def forward_headers(self, headers: dict[str, str]) -> dict[str, str]:
        kept = {k: v for k, v in headers.items() if k not in _DROPPED_REQUEST}
        if self._api_key:
            if self.style == "anthropic":
                kept["x-api-key"] = self._api_key
            else:
                kept["authorization"] = f"Bearer {self._api_key}"
        return kept

    def target(self, path: str) -> str | None:
        """The provider's URL for a request path, or None when the path is not one of the
        model endpoints this style's CLI calls, or would lead anywhere but the provider (a
        path such as `@evil.example/x` would turn the provider's host into a user name)."""
        endpoint = path.split("?", 1)[0]
        if not endpoint.startswith("/") or endpoint.startswith("//"):
            return None
        if endpoint not in ENDPOINTS[self.style]:
            return None
        url = httpx.URL(f"{self._upstream}{path}")
        if (url.scheme, url.host, url.port) != self._origin:
            return None
        return str(url)

    def client(self) -> httpx.Client:
        return upstream_client()

    def refused_by_provider(self, status: int, body: bytes) -> None:
        """The provider turned the key down (401/403): no later call can succeed, and a CLI
        would retry for minutes, so the session is told to stop at once, with the reason."""
        try:
            error = json.loads(body).get("error", {})
            detail = f"{error.get('type', '')}: {error.get('message', '')}".strip(": ")
        except (ValueError, AttributeError):
            detail = body[:200].decode("utf-8", "replace")
        self._on_refused(f"the provider refused the key ({status} {detail})")

    def charge(self, input_tokens: int, output_tokens: int) -> None:
        with self._lock:
            self.spend.calls += 1
            self.spend.input_tokens += input_tokens
            self.spend.output_tokens += output_tokens
            if self.spend.exhausted is not None:
                return
            self.spend.exhausted = self._meter(input_tokens, output_tokens)


class UsageReader:
    """Reads token usage out of an answer as it streams past: one JSON body, or SSE events."""

    def __init__(self, style: Style, streaming: bool) -> None:
        self._style = style
        self._streaming = streaming
        self._buffer = b""
        self.input_tokens = 0
        self.output_tokens = 0

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        if not self._streaming:
            return
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                self._event(line[5:].strip())

    def close(self) -> None:
        if self._streaming:
            if self._buffer.startswith(b"data:"):
                self._event(self._buffer[5:].strip())
            return
        self._event(self._buffer)

    def _event(self, data: bytes) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if self._style == "anthropic":
            self._anthropic(event)
        else:
            self._openai(event)

    def _anthropic(self, event: dict[str, object]) -> None:
        kind = event.get("type")
        message = event.get("message")
        if kind == "message_start" and isinstance(message, dict):
            self._count(message.get("usage"), input_side=True)
        elif kind == "message_delta":
            self._count(event.get("usage"), input_side=False)
        elif kind == "message":  # a whole JSON answer
            self._count(event.get("usage"), input_side=True)
            self._count(event.get("usage"), input_side=False)

    def _openai(self, event: dict[str, object]) -> None:
        response = event.get("response") if event.get("type") == "response.completed" else event
        usage = response.get("usage") if isinstance(response, dict) else None
        if isinstance(usage, dict):
            self.input_tokens = _int(usage.get("input_tokens") or usage.get("prompt_tokens"))
            self.output_tokens = _int(usage.get("output_tokens") or usage.get("completion_tokens"))

    def _count(self, usage: object, *, input_side: bool) -> None:
        if not isinstance(usage, dict):
            return
        if input_side:
            # As the HTTP provider counts them: cache reads and writes are not input tokens.
            self.input_tokens = max(self.input_tokens, _int(usage.get("input_tokens")))
        if not input_side or "output_tokens" in usage:
            # message_delta carries the cumulative output count of the message.
            self.output_tokens = max(self.output_tokens, _int(usage.get("output_tokens")))


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _error_body(style: Style, kind: str, message: str) -> bytes:
    if style == "anthropic":
        body: dict[str, object] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        body = {"error": {"type": kind, "code": kind, "message": message}}
    return json.dumps(body).encode()


def _handler(proxy: ModelProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: ARG002 - no access log
            return

        def do_GET(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def _forward(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            length = int(headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            if not proxy.authorized(headers):
                self._refuse(401, "authentication_error", "not this session's token")
                return
            refused = proxy.refusal()
            if refused is not None:
                self._refuse(
                    400, "invalid_request_error", f"ADE Tasks stopped the session: {refused}"
                )
                return
            target = proxy.target(self.path)
            if target is None or self.command not in ("GET", "POST"):
                self._refuse(
                    403, "permission_error", f"{self.command} {self.path[:200]} is not a model call"
                )
                return
            streaming = b'"stream":true' in body.replace(b" ", b"")
            reader = UsageReader(proxy.style, streaming)
            request = proxy.client().build_request(
                self.command,
                target,
                headers=proxy.forward_headers(headers),
                content=proxy.outgoing(body),
            )
            try:
                upstream = proxy.client().send(request, stream=True)
            except httpx.HTTPError as exc:
                self._refuse(502, "api_error", f"the provider could not be reached: {exc}")
                return
            error_body = b""
            try:
                self.send_response(upstream.status_code)
                for name, value in upstream.headers.items():
                    if name.lower() not in _DROPPED_RESPONSE:
                        self.send_header(name, value)
                self.send_header("connection", "close")
                self.end_headers()
                for chunk in _chunks(upstream):
                    reader.feed(chunk)
                    if upstream.status_code in (401, 403) and len(error_body) < 4096:
                        error_body += chunk
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (httpx.HTTPError, OSError):
                pass  # the client or the provider went away; what arrived is still charged
            finally:
                upstream.close()
                reader.close()
                self.close_connection = True
                if upstream.status_code < 400:
                    proxy.charge(reader.input_tokens, reader.output_tokens)
                elif upstream.status_code in (401, 403):
                    proxy.refused_by_provider(upstream.status_code, error_body)

        def _refuse(self, status: int, kind: str, message: str) -> None:
            data = _error_body(proxy.style, kind, message)
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

    return Handler


def _chunks(response: httpx.Response) -> Iterator[bytes]:
    yield from response.iter_raw()
