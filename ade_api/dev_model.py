"""A scripted stand-in for the Anthropic Messages API on 127.0.0.1: `ade-tasks dev-model`.

It is not a model. It answers `POST /v1/messages` (streamed or not) with turns written in advance,
so an `agent-session` step runs end to end (tool calls through the step's tools, a final summary)
with no provider account: for trying a rule on a laptop, and for the tests, which point the
`anthropic` HTTP provider and the real Claude Code CLI at it.

A conversation request (one that carries tools) gets its answer from, in order: the turns queued
with `script()` (the tests' way: one queue for the whole server), else the `answer` callable
(`ade-tasks dev-model`: the turn of the script at the conversation's own position, `ScriptAnswer`).
Claude Code's side requests (quota checks, titles, token counts) get a short text answer. Every
request is recorded (path, headers, JSON body) for the tests. Streams are Server-Sent Events in the
shape of `tests/fixtures/agents/anthropic/messages.stream.tool-use.sse`.

    with ScriptedAnthropic(key="sk-test") as server:  # other keys get a 401
        server.script(Turn.tool("Bash", command="touch marker"), Turn.text("done"))
        env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test"}
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from ade_tasks.json_document import JsonObject

_ids = itertools.count(1)


@dataclass(frozen=True)
class Turn:
    """One scripted assistant message: text and/or tool_use blocks, and the usage it reports."""

    blocks: tuple[JsonObject, ...]
    input_tokens: int = 10
    output_tokens: int = 5
    delay: float = 0.0  # seconds the server waits before it answers (a hung model call)
    #: An event the server waits for (at most 60 s) before it answers: a test holds the model's
    #: reply until it has made something happen meanwhile, then sets it.
    gate: threading.Event | None = field(default=None, compare=False)

    @classmethod
    def text(cls, text: str, input_tokens: int = 10, output_tokens: int = 5) -> Turn:
        return cls(({"type": "text", "text": text},), input_tokens, output_tokens)

    @classmethod
    def tool(cls, name: str, usage: dict[str, int] | None = None, **tool_input: object) -> Turn:
        usage = usage or {}
        tokens = usage.get("input_tokens", 10), usage.get("output_tokens", 5)
        return cls((tool_use(name, tool_input),), *tokens)

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(b["type"] == "tool_use" for b in self.blocks) else "end_turn"


@dataclass(frozen=True)
class Seen:
    """One request as the server saw it (header names lower-cased)."""

    path: str
    headers: dict[str, str]
    body: JsonObject

    @property
    def conversation(self) -> bool:
        return bool(self.body.get("tools"))


@dataclass
class _State:
    key: str | None = None  # when set, a request with another x-api-key gets a 401
    turns: list[Turn] = field(default_factory=list)
    answer: Callable[[JsonObject], Turn] | None = None  # a conversation's turn from its body
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class ScriptedAnthropic:
    """The server; `script()` queues turns, `requests` lists what arrived."""

    def __init__(
        self,
        key: str | None = None,
        port: int = 0,
        answer: Callable[[JsonObject], Turn] | None = None,
    ) -> None:
        self._state = _State(key=key, answer=answer)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self._state))
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

    def tool_results(self) -> list[JsonObject]:
        """Every tool_result block the CLI sent back in its last conversation request."""
        calls = self.conversation
        return _tool_results(calls[-1].body.get("messages", [])) if calls else []

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (`ade-tasks dev-model`)."""
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def __enter__(self) -> ScriptedAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def tool_use(name: str, tool_input: JsonObject) -> JsonObject:
    """A tool_use block with a fresh id."""
    return {"type": "tool_use", "id": f"toolu_{next(_ids):04d}", "name": name, "input": tool_input}


def result_text(block: JsonObject) -> str:
    """A tool_result block's text, whichever shape its content has."""
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _events(turn: Turn, model: str) -> Iterator[tuple[str, JsonObject]]:
    message: JsonObject = {
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
        start: JsonObject
        delta: JsonObject
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

        def log_message(self, *args: object) -> None:  # noqa: ARG002 - no access log
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            seen = Seen(self.path, self._header_names_lowered(), body)
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
            if turn is None and seen.conversation and state.answer is not None:
                turn = state.answer(body)
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
                state.seen.append(Seen(self.path, self._header_names_lowered(), {}))
            self._json(404, {"type": "error", "error": {"type": "not_found_error"}})

        def _header_names_lowered(self) -> dict[str, str]:
            return {k.lower(): v for k, v in self.headers.items()}

        def _json(self, status: int, body: JsonObject) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _message(turn: Turn, model: str) -> JsonObject:
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


#: A harmless first call for the default answer: the first of these tools the request offers
#: (the engine's tools, then Claude Code's); a request with none of them gets the summary at once.
LOOK_AROUND = (("list_dir", {"path": "."}), ("Glob", {"pattern": "*"}), ("Bash", {"command": "ls"}))
SCRIPT_HELP = (
    "a script is YAML: `turns:`, a list of assistant turns in order, each with `text: ...` "
    "and/or `tool: NAME` and `input: {...}` (the tool's arguments)"
)


class ScriptError(ValueError):
    """A script file that cannot be used; the message says where and what to write."""


class ScriptAnswer:
    """Answers each conversation with the script's turn at its own position (the number of
    assistant messages it already holds), so every session starts the script afresh; past the
    end, or with no script, the default: one look around the worktree, then a summary."""

    def __init__(self, turns: list[Turn] | None = None) -> None:
        self.turns = turns

    def __call__(self, body: JsonObject) -> Turn:
        messages = body.get("messages") or []
        position = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        if self.turns is not None:
            if position < len(self.turns):
                return self.turns[position]
            return Turn.text("The dev-model script has no more turns.")
        offered = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        look = next(((name, args) for name, args in LOOK_AROUND if name in offered), None)
        if position == 0 and look is not None:
            return Turn((tool_use(*look),))
        seen = [result_text(block) for block in _tool_results(messages)]
        found = " ".join(seen[-1].split())[:300] if seen else "nothing (no tool called)"
        return Turn.text(
            "Summary from ade-tasks dev-model, a scripted stand-in (not a model): "
            f"I looked around the worktree and found: {found}"
        )


def _tool_results(messages: list[object]) -> list[JsonObject]:
    results = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                results.append(block)
    return results


def load_script(path: Path) -> list[Turn]:
    """The turns of a script file; a `ScriptError` naming file:line and what to write."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScriptError(f"{path}: cannot read the script ({exc.strerror})") from exc
    return parse_script(text, str(path))


def parse_script(text: str, path: str) -> list[Turn]:
    """The turns of a script's text; `path` names it in the errors."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ScriptError(
            f"{where}: not YAML ({getattr(exc, 'problem', exc)}); {SCRIPT_HELP}"
        ) from exc
    turns_node = _value(root, "turns")
    if not isinstance(turns_node, yaml.SequenceNode) or not turns_node.value:
        anchor = turns_node or root
        line = anchor.start_mark.line + 1 if anchor is not None else 1
        raise ScriptError(f"{path}:{line}: expected a non-empty `turns:` list; {SCRIPT_HELP}")
    data = yaml.safe_load(text)["turns"]
    return [
        _turn(item, f"{path}:{node.start_mark.line + 1}: turn {index}")
        for index, (item, node) in enumerate(zip(data, turns_node.value, strict=True), start=1)
    ]


def _value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        return next((v for k, v in node.value if getattr(k, "value", None) == key), None)
    return None


def _turn(item: object, where: str) -> Turn:
    if not isinstance(item, dict):
        raise ScriptError(f"{where}: expected a mapping; {SCRIPT_HELP}")
    unknown = sorted(set(item) - {"text", "tool", "input"})
    if unknown:
        raise ScriptError(f"{where}: unknown key {unknown[0]!r}; {SCRIPT_HELP}")
    text, tool, tool_input = item.get("text"), item.get("tool"), item.get("input", {})
    if text is None and tool is None:
        raise ScriptError(f"{where}: says neither `text` nor `tool`; {SCRIPT_HELP}")
    if text is not None and not isinstance(text, str):
        raise ScriptError(f'{where}: `text` must be a string, e.g. text: "All done."')
    if tool is not None and (not isinstance(tool, str) or not tool):
        raise ScriptError(f"{where}: `tool` must be a tool's name, e.g. tool: read_file")
    if not isinstance(tool_input, dict):
        raise ScriptError(f"{where}: `input` must be a mapping, e.g. input: {{path: README.md}}")
    if tool is None and "input" in item:
        raise ScriptError(f"{where}: `input` without `tool`; add `tool: NAME`")
    blocks: list[JsonObject] = [{"type": "text", "text": text}] if text is not None else []
    if tool is not None:
        blocks.append(tool_use(tool, tool_input))
    return Turn(tuple(blocks))
