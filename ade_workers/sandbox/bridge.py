"""The worker's end of a sandbox's forwarded port: a Unix socket whose every connection is
forwarded to a TCP address of the worker's (the model proxy on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path
from typing import Protocol

from ade_workers.sandbox.forward import splice


class Owner(Protocol):
    """Who a socket is handed to (an agent user): `hand_over` chowns it to them."""

    def hand_over(self, *paths: Path) -> None: ...


class UnixBridge:
    """Serves `path` from a background thread while the context is open, forwarding each
    connection to `target` (host, port). Only the socket's owner may connect: the worker, or
    the agent user it is handed to (`owner`)."""

    def __init__(
        self, path: Path, target: tuple[str, int], *, owner: Owner | None = None
    ) -> None:
        self.path = path
        self._target = target
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._server.bind(str(path))
            os.chmod(path, 0o600)
            if owner is not None:
                owner.hand_over(path)
            self._server.listen(64)
        except OSError:
            self._server.close()
            raise
        self._thread = threading.Thread(target=self._serve, name="ade-bridge", daemon=True)

    def __enter__(self) -> UnixBridge:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._thread.join(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self._target, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        splice(client, upstream)
