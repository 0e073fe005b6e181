"""The only way out of an agent's sandbox besides its model: an HTTP proxy that lets through the
hosts its rule names (`network_hosts`) and nothing else.

An agent session's sandbox has a network namespace of its own, holding only a loopback. When its
rule names hosts, the worker runs this proxy on 127.0.0.1 for the session, the sandbox forwards a
port to it (like the model proxy's) and the session's environment points `HTTP_PROXY` /
`HTTPS_PROXY` at it (curl, git, pip, npm and both CLIs honour them). A `CONNECT host:port` (TLS)
or an absolute-form request (`GET http://host:port/...`) to a named host is connected and forwarded
byte for byte; anything else is answered `403` with the reason. The sandbox cannot reach the
host's network around it, so a program that ignores the proxy variables reaches nothing.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import socketserver
import threading
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import replace
from urllib.parse import urlsplit

from ade_workers.sandbox.bridge import Owner, UnixBridge
from ade_workers.sandbox.forward import splice
from ade_workers.sandbox.layout import Forward, Sandbox
from ade_workers.sandbox.scratch import make_directory

#: Connecting to a named host and reading a request head are bounded.
CONNECT_TIMEOUT = 10.0
HEAD_LIMIT = 64 * 1024
DEFAULT_PORTS = {"CONNECT": 443, "http": 80}


def parse_allowed(hosts: Iterable[str]) -> frozenset[tuple[str, int | None]]:
    """`name` or `name:port` entries as (lower-case name, port or None for any port)."""
    allowed: set[tuple[str, int | None]] = set()
    for entry in hosts:
        name, colon, port = entry.strip().lower().partition(":")
        allowed.add((name, int(port) if colon else None))
    return frozenset(allowed)


class EgressProxy:
    """Serves on a free port of 127.0.0.1 while the context is open."""

    def __init__(self, hosts: Iterable[str]) -> None:
        self.allowed = parse_allowed(hosts)
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> EgressProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def permits(self, host: str, port: int) -> bool:
        host = host.strip("[]").lower()
        return (host, port) in self.allowed or (host, None) in self.allowed

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(CONNECT_TIMEOUT)
        head = b""
        while b"\r\n\r\n" not in head and len(head) < HEAD_LIMIT:
            chunk = client.recv(65536)
            if not chunk:
                client.close()
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, _, rest = line.partition(" ")
        target = rest.rsplit(" ", 1)[0]
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            port = int(port_text) if port_text.isdigit() else DEFAULT_PORTS["CONNECT"]
            forward = b""
        else:
            url = urlsplit(target)
            host, port = url.hostname or "", url.port or DEFAULT_PORTS["http"]
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            forward = head.replace(target.encode("latin-1"), path.encode("latin-1"), 1)
        if not host or not self.permits(host, port):
            _answer(client, 403, f"ADE Tasks: {host}:{port} is not among this session's "
                    "network_hosts (the rule names the hosts an agent may reach)")  # fmt: skip
            return
        try:
            upstream = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            _answer(client, 502, f"ADE Tasks: {host}:{port} could not be reached: {exc}")
            return
        upstream.settimeout(None)
        client.settimeout(None)
        if method == "CONNECT":
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream.sendall(forward)
        splice(client, upstream)


def _answer(client: socket.socket, status: int, reason: str) -> None:
    text = {403: "Forbidden", 502: "Bad Gateway"}[status]
    body = (reason + "\n").encode()
    with contextlib.suppress(OSError):
        client.sendall(
            f"HTTP/1.1 {status} {text}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
        )
    client.close()


#: The variables that point a session's programs at the egress proxy; the model proxy on
#: 127.0.0.1 stays direct.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")


def open_egress(
    sandbox: Sandbox, hosts: Iterable[str], stack: ExitStack, owner: Owner | None = None
) -> tuple[Sandbox, dict[str, str]]:
    """Start an egress proxy for `hosts` for as long as `stack` is open, and forward it into
    `sandbox`: the sandbox that reaches it, and the environment that points programs at it."""
    proxy = stack.enter_context(EgressProxy(hosts))
    sockets = make_directory("egress-")
    stack.callback(shutil.rmtree, sockets, True)
    if owner is not None:
        sockets.chmod(0o711)  # the agent user passes through to its own socket
    path = sockets / "egress.sock"
    stack.enter_context(UnixBridge(path, ("127.0.0.1", proxy.port), owner=owner))
    layout = replace(
        sandbox,
        read_only=(*sandbox.read_only, sockets),
        forwards=(*sandbox.forwards, Forward(proxy.port, path)),
    )
    url = f"http://127.0.0.1:{proxy.port}"
    return layout, {
        **dict.fromkeys(PROXY_VARIABLES, url),
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
    }
