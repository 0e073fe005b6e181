"""The egress proxy that lets an agent's sandbox reach the hosts its rule names, and no other."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import ValidationError

from ade_tasks.rules.agent import AgentSession
from ade_workers.sandbox.egress import EgressProxy


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def web() -> object:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def ask(proxy: EgressProxy, request: bytes, until: bytes = b"\n") -> bytes:
    """Send one request; what came back once `until` ends it (or the proxy closed)."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as conn:
        conn.sendall(request)
        received = b""
        while not received.endswith(until) and (chunk := conn.recv(65536)):
            received += chunk
        return received


def test_a_named_host_is_forwarded_and_any_other_refused_with_the_reason(web) -> None:
    port = web.server_address[1]
    with EgressProxy([f"localhost:{port}"]) as proxy:
        request = f"GET http://localhost:{port}/x?y=1 HTTP/1.1\r\nHost: a\r\n\r\n"
        allowed = ask(proxy, request.encode(), until=b"/x?y=1")
        other = ask(proxy, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: a\r\n\r\n".encode())
        tunnel = ask(proxy, f"CONNECT localhost:{port + 1} HTTP/1.1\r\n\r\n".encode())
    assert allowed.startswith(b"HTTP/1.0 200") and allowed.endswith(b"hello /x?y=1")
    assert other.startswith(b"HTTP/1.1 403") and b"127.0.0.1:%d is not among" % port in other
    assert tunnel.startswith(b"HTTP/1.1 403")


def test_a_name_without_a_port_allows_every_port_of_it(web) -> None:
    port = web.server_address[1]
    with EgressProxy(["LocalHost"]) as proxy:
        assert proxy.permits("localhost", port) and proxy.permits("localhost", 443)
        assert not proxy.permits("localhost.evil", 443)
        connected = ask(proxy, f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode(), b"\r\n\r\n")
    assert connected.startswith(b"HTTP/1.1 200 Connection established")


@pytest.mark.parametrize("bad", ["http://pypi.org", "pypi.org:0", "pypi.org:99999", "*.x.org", ""])
def test_a_rule_naming_no_host_is_refused_with_what_to_write(bad: str) -> None:
    with pytest.raises(ValidationError) as refused:
        AgentSession(provider="openai", model="m", prompt="p", network_hosts=[bad])
    assert "write e.g. pypi.org or api.github.com:443" in str(refused.value)
