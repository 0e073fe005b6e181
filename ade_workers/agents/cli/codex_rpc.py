"""JSON-RPC with one `codex app-server` process on stdio: a JSON object a line each way.

Two reader threads drain codex's stdout (messages, into `inbox`; `None` at its EOF) and stderr
(the last lines kept for the error a failed session reports), so a chatty codex never blocks
on a full pipe while the session waits for a decision. Our calls are numbered; a response is
matched back to the method it answers."""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections import deque
from typing import IO

from ade_workers.agents.cli.codex_requests import Message
from ade_workers.containment.contained_process import ContainedProcess

STDERR_LINES = 50
"""How many of codex's last output lines a connection keeps."""
_LINE_CAP = 500


class RpcConnection:
    """The framing of one app-server connection: send, call, and what came back."""

    def __init__(self, process: ContainedProcess) -> None:
        assert process.stdin is not None
        self.process = process
        self.stdin: IO[bytes] = process.stdin
        self.inbox: queue.Queue[Message | None] = queue.Queue()
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self.next_id = 0
        self.waiting: dict[int, str] = {}
        self.readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read_stdout(self) -> None:
        for raw in self.process.output:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("{"):
                if line:
                    self.stderr.append(line[:_LINE_CAP])
                continue
            try:
                self.inbox.put(json.loads(line))
            except ValueError:
                self.stderr.append(f"unparsable: {line[: _LINE_CAP - 20]}")
        self.inbox.put(None)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self.stderr.append(line[:_LINE_CAP])

    def send(self, message: Message) -> None:
        """Write one message; a codex that is gone is noted (its EOF on stdout ends the turn)."""
        try:
            self.stdin.write(json.dumps(message).encode() + b"\n")
            self.stdin.flush()
        except OSError as exc:  # codex is gone; its EOF on stdout says so next
            self.stderr.append(f"write to codex failed: {exc}")

    def call(self, method: str, params: Message) -> None:
        """Send a request of ours; its response comes back through `answered`."""
        self.next_id += 1
        self.waiting[self.next_id] = method
        self.send({"id": self.next_id, "method": method, "params": params})

    def answered(self, response: Message) -> str:
        """The method a response answers ("?" for an id we never sent)."""
        return self.waiting.pop(int(response.get("id", -1)), "?")

    def close(self) -> None:
        """Close codex's stdin: app-server exits at EOF."""
        with contextlib.suppress(OSError):
            self.stdin.close()

    def join(self, timeout: float) -> None:
        """Wait for the readers to reach codex's EOF."""
        for reader in self.readers:
            reader.join(timeout=timeout)
