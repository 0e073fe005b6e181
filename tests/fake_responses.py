"""A scripted OpenAI Responses API server on 127.0.0.1, for driving the real `codex` CLI.

`POST /v1/responses` (streamed, `stream: true`) answers with the next scripted `Turn` as
server-sent events: `response.created`, then per output item `response.output_item.added`,
its deltas (`response.output_text.delta`, `response.function_call_arguments.delta`,
`response.custom_tool_call_input.delta`) and `response.output_item.done`, then
`response.completed` with the turn's usage. Every request, to any path, is recorded (path,
lower-cased headers, JSON body); any other path answers 404.

    with ScriptedResponsesServer() as server:
        server.script(
            Turn.command(["bash", "-lc", "touch marker"]),
            Turn.text("done"),
        )
        ... point codex at f"{server.url}/v1" ...
        assert server.tool_outputs()["call_1"] ...

A request that arrives when the script is exhausted gets a plain "(script exhausted)" text
turn, so a session always ends; `exhausted` counts them.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

_ids = itertools.count(1)


@dataclass(frozen=True)
class Usage:
    """The token counts a turn reports in `response.completed`."""

    input_tokens: int = 10
    output_tokens: int = 5
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": self.cached_tokens},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": self.input_tokens + self.output_tokens,
        }


@dataclass(frozen=True)
class Turn:
    """One scripted model response: its output items, usage, and an optional delay before
    it completes (a model that is still thinking)."""

    items: tuple[dict[str, Any], ...]
    usage: Usage = field(default_factory=Usage)
    delay: float = 0.0
    status: int = 200

    @classmethod
    def text(cls, text: str, *, usage: Usage | None = None, delay: float = 0.0) -> Turn:
        """An assistant message: the session's final answer when it is the last turn."""
        item = {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{next(_ids)}",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        return cls((item,), usage or Usage(), delay)

    @classmethod
    def function_call(
        cls, name: str, arguments: dict[str, Any], *, call_id: str | None = None,
        usage: Usage | None = None, delay: float = 0.0,
    ) -> Turn:  # fmt: skip
        """A call of one of the function tools codex advertised (e.g. `shell`, `exec_command`)."""
        item = {
            "type": "function_call",
            "id": f"fc_{next(_ids)}",
            "call_id": call_id or f"call_{next(_ids)}",
            "name": name,
            "arguments": json.dumps(arguments),
        }
        return cls((item,), usage or Usage(), delay)

    @classmethod
    def custom_call(
        cls, name: str, text: str, *, call_id: str | None = None, usage: Usage | None = None
    ) -> Turn:
        """A call of a freeform (custom) tool, e.g. codex's `apply_patch` grammar tool."""
        item = {
            "type": "custom_tool_call",
            "id": f"ctc_{next(_ids)}",
            "call_id": call_id or f"call_{next(_ids)}",
            "name": name,
            "input": text,
        }
        return cls((item,), usage or Usage())

    @classmethod
    def command(
        cls, cmd: str, *, call_id: str | None = None, usage: Usage | None = None,
        delay: float = 0.0, workdir: str | None = None,
    ) -> Turn:  # fmt: skip
        """codex's shell tool (`exec_command`, as 0.169 advertises it) run with `cmd`."""
        arguments: dict[str, Any] = {"cmd": cmd, "tty": False, "yield_time_ms": 10_000}
        if workdir is not None:
            arguments["workdir"] = workdir
        return cls.function_call(
            CODEX_SHELL_TOOL, arguments, call_id=call_id, usage=usage, delay=delay
        )

    @classmethod
    def patch(cls, patch: str, *, call_id: str | None = None) -> Turn:
        """codex's `apply_patch` freeform tool with a `*** Begin Patch` text."""
        return cls.custom_call("apply_patch", patch, call_id=call_id)


#: The shell tool's name in the `tools` codex 0.169 sends (checked by the tests).
CODEX_SHELL_TOOL = "exec_command"


def add_file_patch(path: str, text: str) -> str:
    """An apply_patch text that adds `path` with `text`."""
    lines = "".join(f"+{line}\n" for line in text.splitlines())
    return f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch"


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it (header names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any
    at: float


class ScriptedResponsesServer:
    """A threaded loopback server that streams each `POST /v1/responses` the next `Turn`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.turns: list[Turn] = []
        self.requests: list[RecordedRequest] = []
        self.exhausted = 0
        self.closing = threading.Event()
        self._httpd = _Httpd(("127.0.0.1", 0), _Handler)
        self._httpd.scripted = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        """The server's root, e.g. http://127.0.0.1:54321 (codex's base_url is this + /v1)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, *turns: Turn) -> None:
        """Queue `turns`, streamed one per `POST /v1/responses` in order."""
        with self.lock:
            self.turns.extend(turns)

    def __enter__(self) -> ScriptedResponsesServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.closing.set()  # wakes handlers waiting out a turn's delay
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def model_requests(self) -> list[RecordedRequest]:
        """The `POST /v1/responses` requests, in order."""
        with self.lock:
            return [r for r in self.requests if r.path.endswith("/responses")]

    def tool_outputs(self) -> dict[str, str]:
        """call_id -> the output codex sent back for it (the last request has them all)."""
        outputs: dict[str, str] = {}
        for request in self.model_requests():
            for item in _input_items(request):
                if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                    outputs[str(item.get("call_id"))] = _output_text(item.get("output"))
        return outputs

    def tool_names(self) -> list[str]:
        """The tools the first model request advertised."""
        requests = self.model_requests()
        if not requests or not isinstance(requests[0].json, dict):
            return []
        return [_tool_name(tool) for tool in requests[0].json.get("tools", [])]

    def _record(self, request: RecordedRequest) -> None:
        with self.lock:
            self.requests.append(request)

    def _next_turn(self) -> Turn:
        with self.lock:
            if self.turns:
                return self.turns.pop(0)
            self.exhausted += 1
        return Turn.text("(script exhausted)")


def _input_items(request: RecordedRequest) -> Iterator[dict[str, Any]]:
    body = request.json if isinstance(request.json, dict) else {}
    for item in body.get("input", []):
        if isinstance(item, dict):
            yield item


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict):  # older shape: {"content": ..., "success": ...}
        return _output_text(output.get("content"))
    if isinstance(output, list):
        return "".join(str(part.get("text", "")) for part in output if isinstance(part, dict))
    return json.dumps(output)


def _tool_name(tool: Any) -> str:
    if not isinstance(tool, dict):
        return str(tool)
    name = tool.get("name") or tool.get("function", {}).get("name")
    return str(name or tool.get("type"))


class _Httpd(ThreadingHTTPServer):
    scripted: ScriptedResponsesServer
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        # codex killed mid-stream closes its end: expected in the stop tests.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Httpd
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._record()
        self._not_found()

    def do_POST(self) -> None:
        request = self._record()
        if request.path != "/v1/responses":
            self._not_found()
            return
        turn = self.server.scripted._next_turn()
        if turn.status != 200:
            self._send(turn.status, b'{"error": {"message": "scripted failure"}}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        response_id = f"resp_{next(_ids)}"
        self._event("response.created", response={"id": response_id, "status": "in_progress"})
        for index, item in enumerate(turn.items):
            self._item(index, item)
        if turn.delay and self.server.scripted.closing.wait(turn.delay):
            return
        completed = {"id": response_id, "status": "completed", "usage": turn.usage.as_json()}
        self._event("response.completed", response=completed)

    def _item(self, index: int, item: dict[str, Any]) -> None:
        kind = item["type"]
        started = {**item}
        if kind == "message":
            started["content"] = []
        elif kind == "function_call":
            started["arguments"] = ""
        elif kind == "custom_tool_call":
            started["input"] = ""
        self._event("response.output_item.added", output_index=index, item=started)
        if kind == "message":
            for part in item["content"]:
                self._event(
                    "response.output_text.delta",
                    item_id=item["id"], output_index=index, content_index=0, delta=part["text"],
                )  # fmt: skip
        elif kind == "function_call":
            self._event(
                "response.function_call_arguments.delta",
                item_id=item["id"], output_index=index, delta=item["arguments"],
            )  # fmt: skip
            self._event(
                "response.function_call_arguments.done",
                item_id=item["id"], output_index=index, arguments=item["arguments"],
            )  # fmt: skip
        elif kind == "custom_tool_call":
            self._event(
                "response.custom_tool_call_input.delta",
                item_id=item["id"], output_index=index, delta=item["input"],
            )  # fmt: skip
        self._event("response.output_item.done", output_index=index, item=item)

    def _event(self, kind: str, **data: Any) -> None:
        payload = json.dumps({"type": kind, **data})
        self.wfile.write(f"event: {kind}\ndata: {payload}\n\n".encode())
        self.wfile.flush()

    def _record(self) -> RecordedRequest:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw.decode("utf-8", "replace")
        request = RecordedRequest(
            method=self.command,
            path=urlsplit(self.path).path,
            headers={k.lower(): v for k, v in self.headers.items()},
            json=payload,
            at=time.monotonic(),
        )
        self.server.scripted._record(request)
        return request

    def _not_found(self) -> None:
        self._send(404, b'{"error": {"message": "not found"}}')

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
