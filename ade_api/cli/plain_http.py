"""One HTTP GET through the standard library, for a command whose whole job is that request.

httpx costs a command 140-200 ms of imports on the busy 2-core machine (its package imports its
own command line, and with it rich and pygments where they are installed); urllib about 30 ms
(bench/cli_startup.py). `Api.get` sends the request through `plain_get` and reads the answer
with the same `Api.answer` as every other call, so errors read alike. Proxies come from the
environment as they do for httpx (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`); https is verified
against the system's certificate store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class Response(Protocol):
    """What `Api.answer` reads of a response (httpx's or `PlainResponse`)."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


@dataclass(frozen=True)
class PlainResponse:
    """A response read to its end."""

    status_code: int
    text: str

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not JSON."""
        return json.loads(self.text)


def plain_get(
    url: str, params: Mapping[str, object], headers: Mapping[str, str], timeout: float
) -> PlainResponse:
    """The response to `GET url?params`, whatever its status. Raises OSError when the server
    cannot be reached or the connection breaks (with the socket's own reason)."""
    import http.client
    import urllib.error
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode(params)
    request = urllib.request.Request(f"{url}?{query}" if query else url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return PlainResponse(response.status, _text(response.read()))
    except urllib.error.HTTPError as answered:  # an answer, with an error status
        with answered:
            return PlainResponse(answered.code, _text(answered.read()))
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise reason if isinstance(reason, OSError) else OSError(str(reason)) from None
    except http.client.HTTPException as exc:  # not an HTTP answer (a broken status line)
        raise OSError(f"{type(exc).__name__}: {exc}") from None


def _text(body: bytes) -> str:
    return body.decode("utf-8", errors="replace")
