"""A lean HTTP/1.1 client for load generators: one keep-alive connection, one request at a time.

The load generator shares the machine's cores with the servers it measures, so every
millisecond it spends per request is taken from them. httpx spends about 1 ms of CPU per
request here; writing the request in one buffer and reading the answer with asyncio streams
(on uvloop) spends a fraction of that, for both sides of a benchmark alike.

It speaks only what the benchmarked endpoints answer: a status line, headers and a body with a
Content-Length. Anything else is an `HttpError` (and the connection is dropped).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024


class HttpError(Exception):
    """The request got no usable answer (connection refused or lost, timeout, bad framing)."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes


class Connection:
    """A keep-alive connection to `url`'s host; reopened on the next request after a failure."""

    def __init__(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"{url!r}: only http://host:port URLs are supported")
        self.host, self.port = parts.hostname, parts.port or 80
        self.timeout = timeout
        self._host_header = f"Host: {parts.netloc}\r\n".encode()
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, headers: dict[str, str], body: bytes) -> Answer:
        """POST `body` and read the whole answer, within `timeout` seconds."""
        fields = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        request = b"".join(
            [
                f"POST {path} HTTP/1.1\r\n".encode(),
                self._host_header,
                f"{fields}Content-Length: {len(body)}\r\n\r\n".encode(),
                body,
            ]
        )
        try:
            async with asyncio.timeout(self.timeout):
                return await self._exchange(request)
        except (OSError, EOFError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            self.close()
            kind = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
            raise HttpError(f"{kind}: {exc}") from exc
        except HttpError:
            self.close()
            raise

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None

    async def _exchange(self, request: bytes) -> Answer:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._streams
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD_BYTES:
            raise HttpError(f"an answer's head is over {MAX_HEAD_BYTES} bytes")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        length = None
        keep_alive = True
        for line in lines:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and value.strip().lower() == "close":
                keep_alive = False
        if length is None:
            raise HttpError(f"an answer without Content-Length ({status_line})")
        body = await reader.readexactly(length)
        if not keep_alive:
            self.close()
        return Answer(status, body)
