"""The real `ade-tasks api` on real PostgreSQL when its database connections die under it
(`pg_terminate_backend`, as a failover or a restart does) or the database is not there at all.

Every answer is either the real one (a read is replayed on a fresh connection, a manual run is
dispatched again under its idempotency key) or a 503 that says so, as problem+json (a readable
page under /ui) with `Retry-After`; never a 500, never plain text, never a run stored twice.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import event, func, select, text

from ade_tasks.db.schema import RunRow
from ade_tasks.runs.dispatch import dispatch_retrying
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.testing import InMemorySender
from tests.conftest import write_rule
from tests.fixtures import GITHUB_FIXTURES
from tests.integration.conftest import (
    Cluster,
    api_with_hello_rule,
    terminate_backends,
)
from tests.support import free_port, wait_until

PROBLEM = "application/problem+json"
READS = (
    "/api/v1/rules",
    "/api/v1/runs",
    "/api/v1/rules/hello",
    "/metrics",
    "/ui/runs",
    "/ui/rules",
)
HOOK_KEY = base64.b64encode(b"db-faults-hook-key").decode()
GITHUB_SECRET = "db-faults-github-secret"


def database_name(cluster: Cluster) -> str:
    return cluster.settings.database_url.rsplit("/", 1)[1]


def backends(cluster: Cluster) -> int:
    """Connections open to the test's database (the API's pool among them)."""
    name = database_name(cluster)
    engine = cluster.session_factory.kw["bind"]
    with engine.connect() as connection:
        count = connection.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE datname = :name"), {"name": name}
        ).scalar_one()
    return int(count)


def assert_answered(response: httpx.Response, what: str, says: str = "try again") -> None:
    """A real answer, or a 503 that says what to do: never a 500, never plain text."""
    status, kind = response.status_code, response.headers.get("content-type", "")
    if status < 400:
        return
    assert status == 503, f"{what}: {status} {kind} {response.text[:300]}"
    assert response.headers.get("retry-after", "").isdigit(), f"{what}: no Retry-After"
    if response.request.url.path.startswith("/ui"):
        assert kind.startswith("text/html"), f"{what}: {kind}"
        assert says in response.text, response.text
    else:
        assert kind == PROBLEM, f"{what}: {kind} {response.text[:300]}"
        body = response.json()
        assert body["status"] == 503 and says in body["detail"], body


def runs_with_key(cluster: Cluster, key: str) -> int:
    with cluster.session_factory() as session:
        stmt = select(func.count()).where(RunRow.idempotency_key == key)
        return int(session.scalar(stmt) or 0)


def all_runs(cluster: Cluster) -> list[RunRow]:
    with cluster.session_factory() as session:
        return list(session.scalars(select(RunRow)))


@pytest.fixture
def api(cluster: Cluster) -> Iterator[httpx.Client]:
    client = api_with_hello_rule(cluster)
    yield client
    client.close()


def warm(api: httpx.Client) -> None:
    """Fill the API's pool with connections, so the termination hits pooled ones."""
    for path in READS:
        assert api.get(path).status_code == 200, path


# --- reads are replayed on a fresh connection ---------------------------------------------------


@pytest.mark.parametrize("path", READS)
def test_a_read_after_its_connections_were_terminated_is_answered(
    cluster: Cluster, api: httpx.Client, path: str
) -> None:
    # Given an API whose pooled connections were all terminated by the server
    warm(api)
    terminate_backends(cluster)
    # When a read arrives, then it is answered for real: replayed on a fresh connection
    response = api.get(path)
    assert response.status_code == 200, response.text[:500]
    if path == "/metrics":
        assert "ade_database_up 1.0" in response.text


# --- manual runs: dispatched again under the same key, stored once ------------------------------


def test_a_manual_run_after_a_blip_is_accepted_and_stored_once(
    cluster: Cluster, api: httpx.Client
) -> None:
    warm(api)
    terminate_backends(cluster)
    response = api.post("/api/v1/rules/hello/runs", json={})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["created"] is True, body
    assert [run.id for run in all_runs(cluster)] == [body["run_id"]]


def test_a_keyed_manual_run_after_a_blip_is_stored_once(
    cluster: Cluster, api: httpx.Client
) -> None:
    warm(api)
    terminate_backends(cluster)
    first = api.post("/api/v1/rules/hello/runs", json={}, headers={"Idempotency-Key": "k-1"})
    terminate_backends(cluster)
    again = api.post("/api/v1/rules/hello/runs", json={}, headers={"Idempotency-Key": "k-1"})
    assert (first.status_code, again.status_code) == (202, 202), (first.text, again.text)
    assert first.json()["run_id"] == again.json()["run_id"]
    assert again.json()["created"] is False
    assert runs_with_key(cluster, "manual:k-1") == 1


def test_the_web_pages_run_now_form_after_a_blip_starts_one_run(
    cluster: Cluster, api: httpx.Client
) -> None:
    warm(api)
    terminate_backends(cluster)
    response = api.post("/ui/rules/hello/runs", data={"key": "form-1"}, follow_redirects=False)
    assert response.status_code == 303, response.text[:500]
    assert runs_with_key(cluster, "manual:ui:form-1") == 1


def test_a_dispatch_whose_insert_answer_was_lost_stores_and_sends_its_run_once(
    cluster: Cluster,
) -> None:
    # Given a manual rule, and a connection that dies just after the run's INSERT took effect
    write_rule(cluster.tmp / "rules", "hello.yaml", """
        id: hello
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{type: run-command, command: "echo hi"}]}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    engine = cluster.session_factory.kw["bind"]
    lost: list[str] = []

    def lose_the_answer(*args: Any) -> None:
        statement = str(args[2])
        if statement.startswith("INSERT INTO runs") and not lost:
            lost.append(statement)
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    event.listen(engine, "after_cursor_execute", lose_the_answer)
    sender = InMemorySender()
    # When the dispatch is retried under the request's own key
    trigger = TriggerEvent.manual(key="request:lost-answer")
    result = dispatch_retrying(cluster.session_factory, sender, "hello", trigger, own_key=True)
    event.remove(engine, "after_cursor_execute", lose_the_answer)
    # Then the run the lost attempt stored is the answer, stored once and sent once
    assert lost
    assert (result.created, result.sent) == (True, True)
    assert runs_with_key(cluster, "manual:request:lost-answer") == 1
    assert sender.sent == [(result.run.id, result.run.queue, "hello")]


# --- under load: six rounds of terminations while requests keep coming --------------------------


def test_terminations_under_load_give_answers_or_503s_and_no_run_twice(
    cluster: Cluster, api: httpx.Client
) -> None:
    warm(api)
    answers: list[tuple[str, httpx.Response]] = []
    accepted: dict[str, str] = {}  # idempotency key -> run id
    stop = threading.Event()
    lock = threading.Lock()

    errors: list[BaseException] = []  # a dropped connection is no answer either

    def client_loop(index: int) -> None:
        with httpx.Client(base_url=api.base_url, headers=api.headers, timeout=30) as client:
            n = 0
            while not stop.is_set():
                n += 1
                key = f"load-{index}-{n}"
                path = READS[n % len(READS)]
                try:
                    read = client.get(path)
                    run = client.post(
                        "/api/v1/rules/hello/runs", json={}, headers={"Idempotency-Key": key}
                    )
                except httpx.HTTPError as exc:
                    errors.append(exc)
                    return
                with lock:
                    answers.extend([(f"GET {path}", read), (f"POST run {key}", run)])
                    if run.status_code == 202:
                        accepted[key] = run.json()["run_id"]

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(6):
            wait_until(lambda: backends(cluster) >= 3, 10, "the API to hold connections again")
            terminate_backends(cluster)
            wanted = len(answers) + 8
            wait_until(lambda n=wanted: len(answers) >= n, 30, "requests to go on after the blip")
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not errors, errors
    for what, response in answers:
        assert_answered(response, what)
    statuses = [response.status_code for _, response in answers]
    assert statuses.count(503) < len(statuses) // 4, statuses  # mostly answered for real
    for key, run_id in accepted.items():
        with cluster.session_factory() as session:
            rows = list(
                session.scalars(select(RunRow).where(RunRow.idempotency_key == f"manual:{key}"))
            )
        assert [row.id for row in rows] == [run_id], key
    keys = [run.idempotency_key for run in all_runs(cluster)]
    assert len(keys) == len(set(keys))


# --- the database is not there at all --------------------------------------------------------


@pytest.fixture
def api_without_database(cluster: Cluster) -> Iterator[httpx.Client]:
    # A port nothing listens on (loopback): every connection attempt is refused.
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    client = cluster.api(env={"ADE_DATABASE_URL": dead})
    yield client
    client.close()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/rules"),
        ("GET", "/api/v1/runs"),
        ("GET", "/metrics"),
        ("POST", "/api/v1/rules/hello/runs"),
        ("GET", "/ui/runs"),
        ("POST", "/ui/rules/hello/runs"),
    ],
)
def test_a_database_that_is_down_gives_503_with_retry_after(
    api_without_database: httpx.Client, method: str, path: str
) -> None:
    started = time.monotonic()
    response = api_without_database.request(method, path, follow_redirects=False)
    assert response.status_code == 503, response.text[:500]
    assert_answered(response, f"{method} {path}")
    assert time.monotonic() - started < 8  # retried briefly, not for the client's whole timeout


def test_the_readiness_probe_says_the_database_is_down(api_without_database: httpx.Client) -> None:
    response = api_without_database.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] != "ok"


# --- webhook deliveries (their write path is the event writer's) ---------------------------------


def _signed(body: bytes, message_id: str) -> dict[str, str]:
    stamp = str(int(time.time()))
    signed = f"{message_id}.{stamp}.".encode() + body
    digest = hmac.new(base64.b64decode(HOOK_KEY), signed, hashlib.sha256).digest()
    return {
        "webhook-id": message_id,
        "webhook-timestamp": stamp,
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
        "Content-Type": "application/json",
    }


def _hook_env() -> dict[str, str]:
    hook: dict[str, Any] = {"scheme": "standard-webhooks", "secrets": [f"whsec_{HOOK_KEY}"]}
    return {"ADE_HOOKS__DEPLOYS": json.dumps(hook), "ADE_GITHUB__WEBHOOK_SECRET": GITHUB_SECRET}


def _github(api: httpx.Client) -> httpx.Response:
    body = (GITHUB_FIXTURES / "pull_request/opened.payload.json").read_bytes()
    digest = hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": f"sha256={digest}",
        "Content-Type": "application/json",
    }
    return api.post("/api/v1/webhooks/github", content=body, headers=headers)


def test_a_webhook_delivery_after_a_blip_is_accepted_or_refused_with_503(
    cluster: Cluster,
) -> None:
    write_rule(cluster.tmp / "rules", "on-deploy.yaml", """
        id: on-deploy
        triggers: [{type: webhook, hook: deploys}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    api = cluster.api(env=_hook_env())
    body = json.dumps({"type": "deploy.done"}).encode()
    warm_up = api.post("/api/v1/webhooks/deploys", content=body, headers=_signed(body, "msg_0"))
    assert warm_up.status_code == 202, warm_up.text
    assert _github(api).status_code == 202
    for round_ in range(3):
        terminate_backends(cluster)
        message = f"msg_{round_ + 1}_{uuid.uuid4().hex[:6]}"
        response = api.post(
            "/api/v1/webhooks/deploys", content=body, headers=_signed(body, message)
        )
        assert response.status_code in (202, 503), response.text[:500]
        assert_answered(response, f"delivery {message}", says="")
        terminate_backends(cluster)
        github = _github(api)
        assert github.status_code in (202, 503), github.text[:500]
        assert_answered(github, "a GitHub delivery", says="")


def test_a_webhook_delivery_without_a_database_gets_503(cluster: Cluster) -> None:
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    api = cluster.api(env={**_hook_env(), "ADE_DATABASE_URL": dead})
    body = json.dumps({"type": "deploy.done"}).encode()
    response = api.post("/api/v1/webhooks/deploys", content=body, headers=_signed(body, "msg_x"))
    assert response.status_code == 503, response.text[:500]
    assert_answered(response, "delivery without a database", says="")
    github = _github(api)
    assert github.status_code == 503, github.text[:500]
    assert_answered(github, "a GitHub delivery without a database", says="")
