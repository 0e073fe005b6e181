"""The drain's HTTP client for a relay: one page of events per call, over httpx.

Failures map to the drain's rules: a 5xx, a 429, a timeout or a connection error is
`RelayUnavailableError` (transient, with the answer's `Retry-After` as `retry_after`: the drain
backs off, `ade_workers.celery.relay_drain`); a 401 or
403 is `RelayRefusedError` (the token is wrong: retrying does not help until it is fixed); any
other answer that is not a page is `RelayProtocolError`.
"""

from __future__ import annotations

import httpx

from ade_tasks.errors import AdeError, TransientError
from ade_tasks.relay.store import PAGE_LIMIT
from ade_tasks.relay.wire import RelayPage, RelayProtocolError, parse_page
from ade_tasks.retry import retry_after_seconds

EVENTS_PATH = "/relay/v1/events"
WAKE_PATH = "/relay/v1/wake"


class RelayUnavailableError(TransientError):
    """The relay could not be reached, failed (5xx) or asked to be left alone (429); the drain
    backs off and tries again."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RelayRefusedError(AdeError):
    """The relay refused the drain's token: set ADE_RELAY__TOKEN to the relay's token."""


class HttpRelayClient:
    """Reads pages of events from a relay at `url` with bearer `token`."""

    def __init__(
        self, url: str, token: str, *, agent: str = "ade-tasks-drain", timeout: float = 10.0
    ) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url,
            timeout=timeout,
            headers={"Authorization": f"Bearer {token}", "User-Agent": agent},
        )

    def events(self, after: int, limit: int = PAGE_LIMIT) -> RelayPage:
        """The events after cursor `after`, oldest first (at most `limit`)."""
        where = f"the relay at {self.url}"
        try:
            response = self._client.get(EVENTS_PATH, params={"after": after, "limit": limit})
        except httpx.HTTPError as exc:
            raise RelayUnavailableError(
                f"{where} could not be reached ({type(exc).__name__}: {exc}); the drain "
                "backs off and tries again"
            ) from None
        if response.status_code >= 500 or response.status_code == 429:
            retry_after = retry_after_seconds(response.headers.get("retry-after"))
            asked = f", asking for {retry_after:.0f}s (Retry-After)" if retry_after else ""
            raise RelayUnavailableError(
                f"{where} answered {response.status_code} to GET {EVENTS_PATH}?after={after}"
                f"{asked}; the drain backs off and tries again (see the relay's log)",
                retry_after,
            )
        if response.status_code in (401, 403):
            raise RelayRefusedError(
                f"{where} refused the drain's token ({response.status_code}): set "
                "ADE_RELAY__TOKEN on the beats to the token `ade-tasks relay serve` runs with"
            )
        if response.status_code != 200:
            raise RelayProtocolError(
                f"{where} answered {response.status_code} to GET {EVENTS_PATH}: "
                f"{response.text[:200]!r}; check ADE_RELAY__URL"
            )
        try:
            document = response.json()
        except ValueError:
            raise RelayProtocolError(
                f"{where} answered GET {EVENTS_PATH} with something other than JSON; check "
                "ADE_RELAY__URL"
            ) from None
        return parse_page(document, where)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()
