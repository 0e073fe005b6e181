"""The worker's end of a CLI session's tool-call decisions: a Unix socket that answers each call.

A CLI agent's hook (`claude_hook.py`) connects, sends one call as a JSON line and reads one JSON
line back: `{"verdict": "allow" | "deny", "reason": ...}`. The `judge` callable makes the
decision (the engine's policy); an exception in it is answered with a deny that names it, so a
bug in the engine refuses a call rather than letting it through. The socket lives in the
session's private directory (mode 0700) and is gone when the session ends.

`LineServer` is the transport (one JSON line in, one out, a thread per connection); the engine's
tool bridge (`tool_bridge.py`) serves the sandbox's MCP helper on one too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Self

from ade_tasks.json_document import JsonObject
from ade_workers.containment.agent_user import AgentUser

log = logging.getLogger(__name__)

Judge = Callable[[JsonObject], tuple[str, str]]
"""A call (as the CLI sent it) -> (verdict "allow" | "deny", reason)."""
READ_TIMEOUT = 10.0
MAX_CALL_BYTES = 4_000_000


class LineServer:
    """Serves `path` from a background thread while the context is open: each connection sends
    one JSON object as a line and gets `handle`'s answer back as one line (`failed` builds the
    answer to an unreadable request or a handler that raised). Only the socket's owner may
    connect: the worker, or the agent user it is handed to (`owner`)."""

    def __init__(
        self,
        path: Path,
        handle: Callable[[JsonObject], JsonObject],
        failed: Callable[[str], JsonObject],
        *,
        owner: AgentUser | None = None,
        name: str = "ade-decisions",
    ) -> None:
        self.path = path
        self._handle = handle
        self._failed = failed
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(str(path))
            os.chmod(path, 0o600)  # only its owner may connect: the worker's, or the agent user's
            if owner is not None:
                owner.hand_over(path)
            self._sock.listen(64)
        except OSError:
            self._sock.close()
            raise
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._closed = threading.Event()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            # A thread per connection: a client that connects and sends nothing (a tool of the
            # session can reach the socket) must not hold up the hook's real calls.
            threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def _serve_one(self, conn: socket.socket) -> None:
        with conn:
            self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(READ_TIMEOUT)
        try:
            raw = b""
            while not raw.endswith(b"\n") and len(raw) < MAX_CALL_BYTES:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                raw += chunk
            request = json.loads(raw)
            if not isinstance(request, dict):
                raise ValueError("a request must be a JSON object")
        except (OSError, ValueError) as exc:
            self._reply(conn, self._failed(f"unreadable request: {exc}"))
            return
        try:
            answer = self._handle(request)
        except Exception as exc:  # a bug in the engine refuses the call, never lets it pass
            log.exception("answering %s failed", self.path.name)
            answer = self._failed(f"the engine failed to decide or run this call ({exc})")
        self._reply(conn, answer)

    @staticmethod
    def _reply(conn: socket.socket, answer: JsonObject) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(answer).encode() + b"\n")


class DecisionServer(LineServer):
    """Serves the judge's decisions on `path` while the context is open."""

    def __init__(self, path: Path, judge: Judge, *, owner: AgentUser | None = None) -> None:
        judging = threading.Lock()  # one decision at a time: the judge keeps the session's state

        def decide(call: JsonObject) -> JsonObject:
            with judging:
                verdict, reason = judge(call)
            return {"verdict": verdict, "reason": reason}

        super().__init__(path, decide, _deny, owner=owner)


def _deny(reason: str) -> JsonObject:
    return {"verdict": "deny", "reason": reason}
