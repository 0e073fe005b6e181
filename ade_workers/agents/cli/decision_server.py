"""The worker's end of a CLI session's tool-call decisions: a Unix socket that answers each call.

A CLI agent's hook (`claude_hook.py`) connects, sends one call as a JSON line and reads one JSON
line back: `{"verdict": "allow" | "deny", "reason": ...}`. The `judge` callable makes the
decision (the engine's policy); an exception in it is answered with a deny that names it, so a
bug in the engine refuses a call rather than letting it through. The socket lives in the
session's private directory (mode 0700) and is gone when the session ends.
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
from typing import Any

from ade_workers.engine.agent_user import AgentUser

log = logging.getLogger(__name__)

Judge = Callable[[dict[str, Any]], tuple[str, str]]
"""A call (as the CLI sent it) -> (verdict "allow" | "deny", reason)."""
READ_TIMEOUT = 10.0
MAX_CALL_BYTES = 4_000_000


class DecisionServer:
    """Serves decisions on `path` from a background thread while the context is open."""

    def __init__(self, path: Path, judge: Judge, *, owner: AgentUser | None = None) -> None:
        self.path = path
        self._judge = judge
        self._judging = threading.Lock()
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
        self._thread = threading.Thread(target=self._serve, name="ade-decisions", daemon=True)
        self._closed = threading.Event()

    def __enter__(self) -> DecisionServer:
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
            call = json.loads(raw)
            if not isinstance(call, dict):
                raise ValueError("a tool call must be a JSON object")
        except (OSError, ValueError) as exc:
            self._reply(conn, "deny", f"unreadable tool call: {exc}")
            return
        try:
            with self._judging:  # one decision at a time: the judge keeps the session's state
                verdict, reason = self._judge(call)
        except Exception as exc:  # a bug in the engine refuses the call, never lets it pass
            log.exception("deciding a tool call failed")
            verdict, reason = "deny", f"the engine failed to decide this call ({exc})"
        self._reply(conn, verdict, reason)

    @staticmethod
    def _reply(conn: socket.socket, verdict: str, reason: str) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"verdict": verdict, "reason": reason}).encode() + b"\n")
