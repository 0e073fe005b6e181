"""A scripted Anthropic Messages API server on 127.0.0.1 for the real Claude Code CLI.

Claude Code streams (`"stream": true`) and sends side requests besides the conversation (quota
checks, titles, token counts). The server answers each `POST /v1/messages` that carries tools
(the session's conversation) with the next scripted `Turn`, as Server-Sent Events in the shape of
`tests/fixtures/agents/anthropic/messages.stream.tool-use.sse`; any other message request gets a
short text answer, and every request is recorded (path, headers, JSON body) for the tests.

    with ScriptedAnthropic(key="sk-test") as server:  # other keys get a 401
        server.script(Turn.tool("Bash", command="touch marker"), Turn.text("done"))
        env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test"}
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass(frozen=True)
class Turn:
    """One scripted assistant message: text and/or tool_use blocks, and the usage it reports."""

    blocks: tuple[dict[str, Any], ...]
    input_tokens: int = 10
    output_tokens: int = 5
    delay: float = 0.0  # seconds the server waits before it answers (a hung model call)
    #: An event the server waits for (at most 60 s) before it answers: a test holds the model's
    #: reply until it has made something happen meanwhile, then sets it.
    gate: threading.Event | None = field(default=None, compare=False)

    @classmethod
    def text(cls, text: str, **usage: int) -> Turn:
        return cls(({"type": "text", "text": text},), **usage)

    @classmethod
    def tool(cls, name: str, usage: dict[str, int] | None = None, **tool_input: Any) -> Turn:
        block = {"type": "tool_use", "id": f"toolu_{next(_ids):04d}", "name": name}
        return cls(({**block, "input": tool_input},), **(usage or {}))

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(b["type"] == "tool_use" for b in self.blocks) else "end_turn"


@dataclass(frozen=True)
class Seen:
    """One request as the server saw it (header names lower-cased)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def conversation(self) -> bool:
        return bool(self.body.get("tools"))


@dataclass
class _State:
    key: str | None = None  # when set, a request with another x-api-key gets a 401
    turns: list[Turn] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class ScriptedAnthropic:
    """The server; `script()` queues turns, `requests` lists what arrived."""

    def __init__(self, key: str | None = None) -> None:
        self._state = _State(key=key)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self._state))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def script(self, *turns: Turn) -> None:
        with self._state.lock:
            self._state.turns.extend(turns)

    @property
    def requests(self) -> list[Seen]:
        with self._state.lock:
            return list(self._state.seen)

    @property
    def conversation(self) -> list[Seen]:
        """The session's own model calls, in order."""
        return [seen for seen in self.requests if seen.conversation]

    def tool_results(self) -> list[dict[str, Any]]:
        """Every tool_result block the CLI sent back in its last conversation request."""
        calls = self.conversation
        if not calls:
            return []
        results = []
        for message in calls[-1].body.get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results.append(block)
        return results

    def __enter__(self) -> ScriptedAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def result_text(block: dict[str, Any]) -> str:
    """A tool_result block's text, whichever shape its content has."""
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _events(turn: Turn, model: str) -> Iterator[tuple[str, dict[str, Any]]]:
    message = {
        "id": f"msg_{next(_ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": 1},
    }
    yield "message_start", {"type": "message_start", "message": message}
    for index, block in enumerate(turn.blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": start,
            },
        )
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": turn.stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": turn.output_tokens},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            with state.lock:
                state.seen.append(seen)
                turn = state.turns.pop(0) if seen.conversation and state.turns else None
            if state.key is not None and seen.headers.get("x-api-key") != state.key:
                error = {"type": "authentication_error", "message": "invalid x-api-key"}
                self._json(401, {"type": "error", "error": error})
                return
            if not self.path.split("?")[0].endswith("/v1/messages"):
                self._json(404, {"type": "error", "error": {"type": "not_found_error"}})
                return
            if turn is None:
                turn = Turn.text("ok" if not seen.conversation else "(no more scripted turns)")
            time.sleep(turn.delay)
            if turn.gate is not None:
                turn.gate.wait(60)
            model = str(body.get("model", "claude-test"))
            if not body.get("stream"):
                self._json(200, _message(turn, model))
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            for name, data in _events(turn, model):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()
            self.close_connection = True

        def do_GET(self) -> None:
            with state.lock:
                state.seen.append(Seen(self.path, dict(self.headers), {}))
            self._json(404, {"type": "error", "error": {"type": "not_found_error"}})

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _message(turn: Turn, model: str) -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(turn.blocks),
        "stop_reason": turn.stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens},
    }
