"""The engine's MCP server inside a CLI agent's sandbox: it offers the engine's tools (the
`github` and `notify` palettes) and passes every call to the worker, which runs it.

    python -I -S mcp_bridge.py SOCKET

The CLI starts this program as its only MCP server, `ade` (Claude Code names its tools
`mcp__ade__github_pr`, ...), and speaks MCP's stdio transport to it: JSON-RPC 2.0 messages, one
a line, on stdin and stdout (`initialize`, `tools/list`, `tools/call`, `ping`). It holds no
credential and runs no tool: `tools/list` and `tools/call` go as one JSON line each to the
worker's bridge socket (`tool_bridge.py`), which answers with the tools and runs each call with
the cluster's token, and only a call the engine's PreToolUse judgement allowed (so a command of
the agent that connects to the socket itself runs nothing). A call carries Claude Code's id for
it (`_meta["claudecode/toolUseId"]`), which is how the worker finds that judgement.

Standard library only: it runs inside the sandbox from an engine-owned, hash-checked copy
(`helpers.py`), with no site packages.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # run with the standard library only (`python -I -S`)
    from ade_tasks.json_document import JsonObject

#: MCP revisions this server speaks; it answers a client's own if listed, else the first.
PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
#: How long `tools/list` waits for the worker; a call waits as long as the worker runs it (the
#: worker bounds it by the session's deadline).
LIST_TIMEOUT = 20.0
TOOL_USE_ID = "claudecode/toolUseId"
_write = threading.Lock()


def ask_worker(path: str, request: JsonObject, timeout: float | None) -> JsonObject:
    """Send one request to the worker's bridge socket and return its one-line answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(json.dumps(request).encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    answer = json.loads(reply)
    if not isinstance(answer, dict):
        raise ValueError(f"the worker answered {reply[:200]!r}")
    return answer


def answer(path: str, method: str, params: JsonObject) -> JsonObject:
    """The result of one request (a JSON-RPC error raises `MethodError`)."""
    if method == "initialize":
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "ade", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": ask_worker(path, {"op": "list"}, LIST_TIMEOUT).get("tools", [])}
    if method == "tools/call":
        meta = params.get("_meta")
        request = {
            "op": "call",
            "name": params.get("name"),
            "arguments": params.get("arguments") or {},
            "tool_use_id": meta.get(TOOL_USE_ID) if isinstance(meta, dict) else None,
        }
        try:
            ran = ask_worker(path, request, None)
        except (OSError, ValueError) as exc:
            ran = {"ok": False, "content": f"the engine could not be reached ({exc})"}
        text = str(ran.get("content", ""))
        return {"content": [{"type": "text", "text": text}], "isError": not ran.get("ok")}
    raise MethodError(-32601, f"method not found: {method}")


class MethodError(Exception):
    """A JSON-RPC error answer: its code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def serve_one(path: str, message: JsonObject) -> None:
    """Answer one request (a notification, having no id, gets no answer)."""
    if "id" not in message:
        return
    reply: JsonObject = {"jsonrpc": "2.0", "id": message["id"]}
    params = message.get("params")
    try:
        reply["result"] = answer(path, str(message.get("method")), params or {})
    except MethodError as exc:
        reply["error"] = {"code": exc.code, "message": str(exc)}
    except Exception as exc:  # the worker unreachable for a list: an error the CLI shows
        reply["error"] = {"code": -32603, "message": f"the engine could not answer ({exc})"}
    send(reply)


def send(message: JsonObject) -> None:
    with _write:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: mcp_bridge.py SOCKET\n")
        return 2
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            send(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}
            )
            continue
        if isinstance(message, dict):
            # A thread per request: a long tool call must not hold up the CLI's pings.
            threading.Thread(target=serve_one, args=(argv[1], message), daemon=True).start()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
