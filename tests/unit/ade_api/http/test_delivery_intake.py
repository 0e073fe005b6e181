"""Custom hook deliveries through the route, in process on SQLite: deliveries that fail
authentication count on their own limit and are logged on their own ring, so forgeries never
get a real delivery refused or pushed out of the log."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from ade_api.http.delivery_intake import EventIntake
from ade_api.http.deps import Services
from ade_api.http.routes import webhooks
from ade_tasks.db import ingress as ingress_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.hooks.config import CHECK_ORDER, HookConfig
from ade_tasks.settings import Settings
from ade_tasks.testing import InMemorySender
from ade_workers.celery.app import create_celery_app

SECRET = "hook-secret"
URL = "/api/v1/webhooks/deploys"


@pytest.fixture
def client(
    session_factory: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    # One rate window for the whole test, however long it takes.
    now = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)
    monkeypatch.setattr(webhooks, "utcnow", lambda: now)
    hook = HookConfig.model_validate({"scheme": "hmac-sha256", "secrets": [SECRET]})
    settings = Settings(hooks={"deploys": hook})
    sender = InMemorySender()
    app = FastAPI()
    celery = create_celery_app(settings, session_factory=session_factory)
    intake = EventIntake(settings, session_factory, sender)
    app.state.services = Services(settings, session_factory, sender, celery, intake)
    app.include_router(webhooks.router)
    with TestClient(app) as test_client:
        yield test_client
    intake.publisher.close()


def post(client: TestClient, body: bytes, secret: str = SECRET, delivery: str = "") -> int:
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-Signature-256": signature, "X-Request-Id": delivery}
    return client.post(URL, content=body, headers=headers).status_code


def test_forged_deliveries_never_use_up_the_hooks_limit_or_its_log(client: TestClient) -> None:
    # Given 65 deliveries signed with the wrong secret: more than the hook's 60 a minute
    forged = [post(client, b'{"n": %d}' % n, secret="guessed", delivery=f"f{n}") for n in range(65)]

    # When the sender, who has the secret, delivers
    real = post(client, json.dumps({"type": "deploy.done"}).encode(), delivery="real-1")

    # Then it is accepted and its log shows it, beside the forgeries' own ring
    log = client.get(f"{URL}/deliveries").json()
    assert forged[:60] == [401] * 60 and set(forged[60:]) == {429}
    assert real == 202
    assert log[0]["delivery_id"] == "real-1" and log[0]["status_code"] == 202
    assert log[0]["rejected"] is False
    rejected = [entry for entry in log if entry["rejected"]]
    assert len(rejected) == ingress_db.DELIVERY_LOG
    assert {entry["status_code"] for entry in rejected} == {401}


def test_the_hooks_own_limit_still_holds_for_authentic_deliveries(client: TestClient) -> None:
    codes = [post(client, b'{"n": %d}' % n, delivery=f"d{n}") for n in range(61)]

    assert codes[:60] == [202] * 60 and codes[60] == 429


def test_the_log_can_be_read_one_ring_at_a_time(client: TestClient) -> None:
    post(client, b"{}", secret="guessed", delivery="forged")
    post(client, b"{}", delivery="real")

    authentic = client.get(f"{URL}/deliveries", params={"rejected": "false"}).json()
    refused = client.get(f"{URL}/deliveries", params={"rejected": "true"}).json()

    assert [entry["delivery_id"] for entry in authentic] == ["real"]
    assert [entry["delivery_id"] for entry in refused] == ["forged"]


def test_a_connection_lost_at_the_rate_check_is_retried_and_the_delivery_accepted(
    client: TestClient, session_factory: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a database blip: the rate check's first statement meets a dead connection
    real_count = ingress_db.count_delivery
    failures = [
        OperationalError("INSERT", {}, Exception("server closed the connection"), False, True)
    ]

    def count_after_blip(session: Session, hook_id: str, now: datetime) -> int:
        if failures:
            raise failures.pop()
        return real_count(session, hook_id, now)

    monkeypatch.setattr(ingress_db, "count_delivery", count_after_blip)

    # When an authentic delivery arrives
    code = post(client, b'{"n": 1}', delivery="after-blip")

    # Then it is accepted, counted once on the hook's window and logged
    assert code == 202
    now = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)
    with session_factory.begin() as session:
        assert real_count(session, "deploys", now) == 2  # the delivery, then this look
    log = client.get(f"{URL}/deliveries").json()
    assert [entry["delivery_id"] for entry in log] == ["after-blip"]


def test_the_rate_limit_is_checked_after_the_signature() -> None:
    assert CHECK_ORDER.index("signature") < CHECK_ORDER.index("rate")
    assert CHECK_ORDER.index("token") < CHECK_ORDER.index("rate")


def test_refusals_over_their_limit_are_counted_but_not_logged(
    session_factory: SessionFactory,
) -> None:
    now = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)
    with session_factory.begin() as session:
        logged = [
            ingress_db.log_rejected(
                session,
                hook_id="ci",
                now=now,
                limit=3,
                status_code=401,
                outcome="refused: the token does not match",
                delivery_id=None,
                headers={},
                body=b"",
            )
            for _ in range(5)
        ]
        authentic = ingress_db.count_delivery(session, "ci", now)
        kept = ingress_db.list_deliveries(session, "ci")

    assert logged == [True, True, True, False, False]
    assert authentic == 1
    assert [row.rejected for row in kept] == [True, True, True]
