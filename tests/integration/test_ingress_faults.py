"""Hostile and unlucky ingress on real PostgreSQL, Redis, `ade-tasks api` and `celery worker`
processes: a ReDoS pull request does not block the workers, forged deliveries do not starve real
ones, and an event whose database connection is terminated while it is matched is matched later
instead of failing."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
from sqlalchemy import create_engine, select, text

from ade_tasks.db.schema import IngressEventRow, RunRow
from tests.conftest import write_rule
from tests.fixtures import GITHUB_FIXTURES
from tests.integration.conftest import Cluster
from tests.support import wait_until

SECRET = "It's a Secret to Everybody"
HOOK_KEY = base64.b64encode(b"standard-webhooks-test-key").decode()
PR_OPENED = GITHUB_FIXTURES / "pull_request/opened.payload.json"


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver_pr(api: httpx.Client, body: bytes, *, secret: str = SECRET) -> httpx.Response:
    headers = {
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, secret),
        "Content-Type": "application/json",
    }
    return api.post("/api/v1/webhooks/github", content=body, headers=headers)


def pr_titled(title: str, number: int) -> bytes:
    payload = json.loads(PR_OPENED.read_bytes())
    payload["pull_request"]["title"] = title
    payload["pull_request"]["number"] = payload["number"] = number
    return json.dumps(payload).encode()


def standard_headers(body: bytes, key: str = HOOK_KEY) -> dict[str, str]:
    message_id = f"msg_{uuid.uuid4().hex}"
    stamp = str(int(time.time()))
    signed = f"{message_id}.{stamp}.".encode() + body
    digest = hmac.new(base64.b64decode(key), signed, hashlib.sha256).digest()
    return {
        "webhook-id": message_id,
        "webhook-timestamp": stamp,
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }


def rules(cluster: Cluster, documents: dict[str, str]) -> None:
    directory = cluster.tmp / "rules"
    for rule_id, trigger in documents.items():
        write_rule(
            directory,
            f"{rule_id}.yaml",
            f"id: {rule_id}\ntriggers: [{trigger}]\n"
            "execution: {kind: built-in, actions: [{type: run-command, command: 'echo hi'}]}\n",
        )
    cluster.sync_rules(directory)


def events(cluster: Cluster) -> list[IngressEventRow]:
    with cluster.session_factory() as session:
        return list(session.scalars(select(IngressEventRow).order_by(IngressEventRow.id)))


def runs(cluster: Cluster) -> list[RunRow]:
    with cluster.session_factory() as session:
        return list(session.scalars(select(RunRow).order_by(RunRow.queued_at)))


@pytest.fixture
def api(cluster: Cluster) -> Iterator[httpx.Client]:
    hook = {"scheme": "standard-webhooks", "secrets": [f"whsec_{HOOK_KEY}"]}
    env = {"ADE_GITHUB__WEBHOOK_SECRET": SECRET, "ADE_HOOKS__DEPLOYS": json.dumps(hook)}
    client = cluster.api(env=env)
    yield client
    client.close()


def test_a_redos_pull_request_does_not_block_the_workers(
    cluster: Cluster, api: httpx.Client
) -> None:
    # Given a rule whose title_regex backtracks exponentially in Python's re, and two workers
    rules(
        cluster,
        {
            "poison-prone": '{type: github.pr_opened, title_regex: "(a+)+$"}',
            "hello": "{type: manual}",
        },
    )
    cluster.worker(concurrency=2)

    broker = redis.Redis.from_url(cluster.settings.broker_url)

    def taken(count: int) -> bool:  # each event's message reached a worker (not one batch)
        handed = int(broker.hlen("unacked")) + sum(e.status != "received" for e in events(cluster))
        return int(broker.llen("ade.ingress")) == 0 and handed >= count

    # When two pull requests arrive titled to trigger it, and then an operator runs another rule
    for count, number in enumerate((101, 102), start=1):
        poisoned = deliver_pr(api, pr_titled("a" * 36 + "!", number))
        assert poisoned.status_code == 202, poisoned.text
        wait_until(lambda count=count: taken(count), 15, f"a worker to take poison event {count}")
    manual = api.post("/api/v1/rules/hello/runs", json={})

    # Then the manual run completes and both events are matched (to no rule)
    assert manual.status_code == 202, manual.text
    wait_until(
        lambda: [run.status for run in runs(cluster)] == ["succeeded"],
        30,
        "the manual run to finish while the poison events are processed",
    )
    wait_until(
        lambda: [e.status for e in events(cluster)] == ["dispatched", "dispatched"],
        30,
        "both poison events to be matched",
    )
    assert [e.runs for e in events(cluster)] == [[], []]
    assert [run.rule_id for run in runs(cluster)] == ["hello"]


def test_forged_deliveries_never_get_a_real_one_refused_or_out_of_the_log(
    cluster: Cluster, api: httpx.Client
) -> None:
    # Given a flood of deliveries signed with a key that is not the hook's, over its 60/minute
    rules(cluster, {"deploy-done": "{type: webhook, hook: deploys}"})
    cluster.worker()
    url = "/api/v1/webhooks/deploys"
    forged_key = base64.b64encode(b"a guess at the key").decode()
    wait_until(lambda: time.time() % 60 < 40, 25, "a fresh minute")  # one rate window
    forged = []
    for n in range(65):
        body = json.dumps({"type": "deploy.done", "n": n}).encode()
        forged.append(api.post(url, content=body, headers=standard_headers(body, forged_key)))

    # When the sender, who has the secret, delivers
    body = json.dumps({"type": "deploy.done", "env": "prod"}).encode()
    real = api.post(url, content=body, headers=standard_headers(body))

    # Then it is accepted, runs, and the delivery log shows it
    assert {r.status_code for r in forged[:60]} == {401}
    assert {r.status_code for r in forged[60:]} == {429}
    assert real.status_code == 202, real.text
    log = api.get(f"{url}/deliveries").json()
    assert (log[0]["status_code"], log[0]["rejected"]) == (202, False)
    assert json.loads(log[0]["body"]) == {"type": "deploy.done", "env": "prod"}
    assert sum(entry["rejected"] for entry in log) == 50
    wait_until(lambda: [run.rule_id for run in runs(cluster)] == ["deploy-done"], 30, "the run")


def test_forged_github_deliveries_leave_nothing_a_real_one_could_miss(
    cluster: Cluster, api: httpx.Client
) -> None:
    body = PR_OPENED.read_bytes()

    forged = [deliver_pr(api, body, secret=f"guess {n}") for n in range(65)]
    real = deliver_pr(api, body)

    assert {r.status_code for r in forged} == {401}
    assert real.status_code == 202, real.text
    assert [e.id for e in events(cluster)] == [real.json()["event_id"]]


def test_an_event_whose_connection_is_terminated_while_matching_is_matched_later(
    cluster: Cluster, api: httpx.Client, database_url: str
) -> None:
    # Given a worker whose matching of a pull request blocks on a lock we hold on `rules`
    rules(cluster, {"reviewer": "{type: github.pr_opened, repo: Codertocat/Hello-World}"})
    cluster.worker(concurrency=1)
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
    blocker = create_engine(database_url).connect()
    try:
        transaction = blocker.begin()
        blocker.execute(text("LOCK TABLE rules IN ACCESS EXCLUSIVE MODE"))
        accepted = deliver_pr(api, PR_OPENED.read_bytes())
        assert accepted.status_code == 202, accepted.text
        event_id = accepted.json()["event_id"]

        def waiting_backends() -> list[int]:
            with admin.connect() as connection:
                return list(
                    connection.execute(
                        text(
                            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                            "AND wait_event_type = 'Lock' "
                            "AND (query ILIKE '%FROM rules%' OR query ILIKE '%JOIN rules%')"
                        )
                    ).scalars()
                )

        wait_until(waiting_backends, 30, "the worker's matching to wait on the lock")

        # When its connection is terminated under it (then the lock goes). The worker's
        # housekeeping (the run.finished sweep) may wait on the same lock and be the first
        # waiter seen, so every waiter on `rules` is terminated until the matching gives up.
        def terminated_and_given_back() -> bool:
            with admin.connect() as connection:
                for pid in waiting_backends():
                    connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            return "the database failed under it" in cluster.children[-1].output()

        wait_until(terminated_and_given_back, 30, "the worker to give the event back", 0.5)
        transaction.rollback()
    finally:
        blocker.close()
        admin.dispose()

    # Then the event stays received, unfailed, and the recovery sweep has it matched
    (event,) = events(cluster)
    assert (event.id, event.status, event.error, event.attempts) == (event_id, "received", None, 0)
    cluster.beat()
    wait_until(
        lambda: [(e.status, len(e.runs or [])) for e in events(cluster)] == [("dispatched", 1)],
        30,
        "the sweep to have the event matched",
    )
    wait_until(lambda: [r.status for r in runs(cluster)] == ["succeeded"], 30, "its run")
