"""A real `ade-tasks relay serve` process for the tests, and GitHub-signed deliveries to it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.integration.test_webhooks import SECRET, deliver
from tests.support import BIN, Child, child_env, free_port, wait_until

TOKEN = "relay-token-for-tests-0123456789"


@dataclass
class RelayProcess:
    """A running relay: its child process, base URL, and a client holding its token."""

    child: Child
    url: str
    client: httpx.Client

    def deliver(
        self, event: str, body: bytes, *, delivery: str | None = None, **headers: str
    ) -> httpx.Response:
        """POST a GitHub delivery signed with SECRET (headers may override the signature)."""
        return deliver(self.client, event, body, delivery=delivery, **headers)

    def events(self, after: int = 0, limit: int = 100) -> list[dict[str, object]]:
        """The relay's events after `after`, as the drain reads them."""
        answer = self.client.get("/relay/v1/events", params={"after": after, "limit": limit})
        assert answer.status_code == 200, answer.text
        events: list[dict[str, object]] = answer.json()["events"]
        return events

    def listeners(self) -> int:
        """How many drains listen for wake-ups."""
        return int(httpx.get(f"{self.url}/healthz").json()["listeners"])


def start_relay(tmp: Path, env: Mapping[str, str] | None = None) -> RelayProcess:
    """`ade-tasks relay serve` on a free port with its SQLite database under `tmp`."""
    port = free_port()
    values = {
        "ADE_DATA_DIR": str(tmp / "relay-data"),
        "ADE_RELAY__TOKEN": TOKEN,
        "ADE_GITHUB__WEBHOOK_SECRET": SECRET,
        **(env or {}),
    }
    argv = [str(BIN / "ade-tasks"), "relay", "serve", "--port", str(port)]
    child = Child(argv, child_env(values), tmp / f"relay-{port}.log", tmp)
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=url, timeout=10, headers={"Authorization": f"Bearer {TOKEN}"})
    wait_until(lambda: client.get("/healthz").status_code == 200, 30, f"the relay ({child.log})")
    return RelayProcess(child, url, client)
