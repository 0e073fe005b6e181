"""`ade-tasks relay serve` as a real process: it verifies GitHub and custom-hook deliveries as
the cluster does, keeps the verified ones under a monotonic cursor with their delivery ids, and
serves them (and wake-ups) only to a caller holding its token."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.fixtures import GITHUB_FIXTURES
from tests.integration.test_webhooks import sign
from tests.relay_support import TOKEN, RelayProcess, start_relay
from tests.support import BIN, Child, child_env, free_port, wait_until

PR = (GITHUB_FIXTURES / "pull_request/opened.payload.json").read_bytes()
ISSUE = (GITHUB_FIXTURES / "issues/opened.payload.json").read_bytes()
HOOK_SECRET = "deploys-secret"


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[RelayProcess]:
    hook = {
        "scheme": "hmac-sha256",
        "header": "X-Signature",
        "secrets": [HOOK_SECRET],
        "id_headers": ["X-Delivery"],
        "max_body_bytes": 2048,
    }
    env = {"ADE_HOOKS__DEPLOYS": json.dumps(hook), "ADE_GITHUB__MAX_BODY_BYTES": str(64 * 1024)}
    process = start_relay(tmp_path, env)
    yield process
    process.client.close()
    process.child.stop()


def test_signed_deliveries_are_kept_oldest_first_with_their_delivery_ids(
    relay: RelayProcess,
) -> None:
    # given two signed GitHub deliveries and GitHub's "Redeliver" of the first
    first = relay.deliver("pull_request", PR, delivery="d-1")
    second = relay.deliver("issues", ISSUE, delivery="d-2")
    again = relay.deliver("pull_request", PR, delivery="d-1")
    ping = relay.deliver("ping", (GITHUB_FIXTURES / "ping/payload.json").read_bytes())

    # then each verified delivery is stored once, under a growing cursor, byte for byte
    assert (first.status_code, first.json()) == (202, {"cursor": 1, "stored": True})
    assert (second.status_code, second.json()) == (202, {"cursor": 2, "stored": True})
    assert (again.status_code, again.json()["duplicate"]) == (200, True)
    assert ping.status_code == 200 and ping.json()["pong"] is True
    events = relay.events()
    assert [(e["cursor"], e["delivery_id"], e["event"]) for e in events] == [
        (1, "d-1", "pull_request"),
        (2, "d-2", "issues"),
    ]
    assert base64.b64decode(str(events[0]["body"])) == PR
    assert [e["cursor"] for e in relay.events(after=1)] == [2]
    assert [e["cursor"] for e in relay.events(after=0, limit=1)] == [1]
    assert relay.events(after=2) == []


@pytest.mark.parametrize("case", ["wrong-secret", "missing", "body-changed", "no-delivery-id"])
def test_bad_github_deliveries_are_refused_and_nothing_is_kept(
    relay: RelayProcess, case: str
) -> None:
    headers: dict[str, str] = {}
    body = PR
    if case == "wrong-secret":
        headers["X-Hub-Signature-256"] = sign(PR, "not the secret")
    elif case == "missing":
        headers["X-Hub-Signature-256"] = ""
    elif case == "body-changed":
        body = PR.replace(b'"opened"', b'"openeD"', 1)
        headers["X-Hub-Signature-256"] = sign(PR)
    else:
        headers["X-GitHub-Delivery"] = ""

    answer = relay.deliver("pull_request", body, **headers)

    assert answer.status_code == (400 if case == "no-delivery-id" else 401), answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["detail"]
    assert relay.events() == []


def test_an_oversized_body_is_refused_with_413(relay: RelayProcess) -> None:
    big = b'{"pad": "' + b"x" * (64 * 1024) + b'"}'
    answer = relay.deliver("pull_request", big)
    assert answer.status_code == 413, answer.text
    assert "at most 65536" in answer.json()["detail"]
    assert relay.events() == []


def test_a_custom_hook_delivery_is_verified_by_its_scheme(relay: RelayProcess) -> None:
    body = b'{"type": "deploy", "env": "prod"}'
    good = hmac.new(HOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    url = f"{relay.url}/api/v1/webhooks/deploys"

    forged = httpx.post(url, content=body, headers={"X-Signature": "0" * 64})
    kept = httpx.post(url, content=body, headers={"X-Signature": good, "X-Delivery": "dep-1"})
    unknown = httpx.post(f"{relay.url}/api/v1/webhooks/nope", content=body)
    too_big = httpx.post(url, content=b"{" + b" " * 4096 + b"}", headers={"X-Signature": good})

    assert forged.status_code == 401, forged.text
    assert kept.status_code == 202, kept.text
    assert unknown.status_code == 404 and "ADE_HOOKS__" in unknown.json()["detail"]
    assert too_big.status_code == 413
    assert [(e["source"], e["delivery_id"], e["event"]) for e in relay.events()] == [
        ("webhook:deploys", "dep-1", None)
    ]


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {TOKEN}"])
def test_events_and_wakeups_need_the_token(relay: RelayProcess, authorization: str | None) -> None:
    relay.deliver("pull_request", PR)
    headers = {"Authorization": authorization} if authorization else {}

    listing = httpx.get(f"{relay.url}/relay/v1/events", headers=headers)
    with pytest.raises(InvalidStatus) as refused:
        connect(
            f"ws://{relay.url.removeprefix('http://')}/relay/v1/wake", additional_headers=headers
        )

    assert listing.status_code == 401
    assert "ADE_RELAY__TOKEN" in listing.json()["detail"]
    assert refused.value.response.status_code == 401


def test_a_limit_over_100_is_refused(relay: RelayProcess) -> None:
    answer = relay.client.get("/relay/v1/events", params={"limit": 101})
    assert answer.status_code == 422


def test_a_listener_is_woken_when_a_delivery_is_stored(relay: RelayProcess) -> None:
    ws_url = f"ws://{relay.url.removeprefix('http://')}/relay/v1/wake"
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {TOKEN}"}) as socket:
        assert json.loads(socket.recv(timeout=5)) == {"type": "hello", "newest": 0}
        assert relay.deliver("pull_request", PR).status_code == 202
        assert json.loads(socket.recv(timeout=5)) == {"type": "wake", "cursor": 1}


def test_the_relay_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    port = free_port()
    env = child_env({"ADE_DATA_DIR": str(tmp_path), "ADE_GITHUB__WEBHOOK_SECRET": "s"})
    child = Child(
        [str(BIN / "ade-tasks"), "relay", "serve", "--port", str(port)], env, tmp_path / "r.log"
    )
    code = wait_until(lambda: child.proc.poll() is not None, 30, "the relay to exit")
    assert code and child.proc.returncode != 0
    assert "ADE_RELAY__TOKEN is not set" in child.output()
    child.stop()


def test_a_relay_on_postgresql_keeps_and_serves_deliveries(
    tmp_path: Path, database_url: str
) -> None:
    # given a relay whose own database is PostgreSQL (ADE_RELAY__DATABASE_URL)
    relay = start_relay(tmp_path, {"ADE_RELAY__DATABASE_URL": database_url})
    try:
        # when two deliveries arrive, one of them twice
        answers = [
            relay.deliver("pull_request", PR, delivery="pg-1").status_code,
            relay.deliver("issues", ISSUE, delivery="pg-2").status_code,
            relay.deliver("issues", ISSUE, delivery="pg-2").status_code,
        ]

        # then they are kept once each, in order, byte for byte
        assert answers == [202, 202, 200]
        events = relay.events()
        assert [(e["cursor"], e["delivery_id"]) for e in events] == [(1, "pg-1"), (2, "pg-2")]
        assert base64.b64decode(str(events[1]["body"])) == ISSUE
    finally:
        relay.client.close()
        relay.child.stop()
