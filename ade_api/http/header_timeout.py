"""uvicorn's HTTP protocol with a bound on the time a client takes to send a request's headers.

uvicorn (0.54) closes a keep-alive connection that stays idle after a response
(`timeout_keep_alive`, 5 s), but nothing bounds a connection that has not sent a complete
request head: one that sends part of a request line, or a header a byte at a time, or nothing
at all after connecting, is held open for good, and a thousand of them hold a thousand sockets
and file descriptors of the API (slowloris). Its source shows it: the keep-alive timer is armed
only in `on_response_complete` and cancelled by any data received.

`HeaderTimeoutProtocol` arms a deadline of `HEADER_TIMEOUT_SECONDS` (10 s) when a connection
opens and again when a response completes; it is cancelled once the next request's headers
are complete. A connection still short of them at the deadline is answered 408 and closed.
Request bodies are not covered here: routes that read large bodies bound them themselves (the
webhooks' `ADE_INGRESS_READ_TIMEOUT`). `ade-tasks api` and `ade-tasks dev` serve with it
(`http=HTTP_PROTOCOL`).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_SECONDS = 10.0
#: What uvicorn's `http` option takes to serve with it (an import string: it crosses processes).
HTTP_PROTOCOL = "ade_api.http.header_timeout:HeaderTimeoutProtocol"
_MESSAGE = b"the request headers did not arrive within %d s\n" % HEADER_TIMEOUT_SECONDS
REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\n"
    b"connection: close\r\n"
    b"\r\n%s" % (len(_MESSAGE), _MESSAGE)
)


class _HeaderDeadline(asyncio.Protocol):
    """The deadline itself, armed when a connection opens, for the protocols below (listed
    first among their bases, so these methods wrap uvicorn's)."""

    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    _header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        self._cancel_header_deadline()
        self._header_deadline = self.loop.call_later(HEADER_TIMEOUT_SECONDS, self._too_slow)

    def _cancel_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _too_slow(self) -> None:
        self._header_deadline = None
        if not self.transport.is_closing():
            self.transport.write(REQUEST_TIMEOUT)
            self.transport.close()


class HeaderTimeoutH11Protocol(_HeaderDeadline, H11Protocol):
    """uvicorn's h11 protocol with the header deadline."""

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # this cycle's request head is complete
            self._cancel_header_deadline()

    def on_response_complete(self) -> None:
        # Armed first: the next request's head, if already buffered, is handled (and the
        # deadline cancelled) inside.
        if not self.transport.is_closing():
            self._arm_header_deadline()
        super().on_response_complete()


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is not installed: uvicorn uses h11
    HeaderTimeoutProtocol: type[asyncio.Protocol] = HeaderTimeoutH11Protocol
else:

    class HeaderTimeoutHttpToolsProtocol(_HeaderDeadline, HttpToolsProtocol):
        """uvicorn's httptools protocol (its default when installed) with the deadline."""

        def on_headers_complete(self) -> None:
            self._cancel_header_deadline()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            waiting = bool(self.pipeline)  # a pipelined request whose head is complete
            super().on_response_complete()
            if not waiting and not self.transport.is_closing():
                self._arm_header_deadline()

    HeaderTimeoutProtocol = (
        HeaderTimeoutHttpToolsProtocol
        if AutoHTTPProtocol is HttpToolsProtocol
        else HeaderTimeoutH11Protocol
    )
