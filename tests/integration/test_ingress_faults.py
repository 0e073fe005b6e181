"""Hostile and unlucky ingress on real PostgreSQL, Redis, `ade-tasks api` and `celery worker`
processes: a ReDoS pull request does not block the workers, and an event whose database connection
is terminated while it is matched is matched later instead of failing."""

from __future__ import annotations

import hashlib
import hmac
import json
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
    env = {"ADE_GITHUB__WEBHOOK_SECRET": SECRET}
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
        return int(broker.llen("ade.control")) == 0 and handed >= count

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

        def waiting_backend() -> int | None:
            with admin.connect() as connection:
                return connection.execute(
                    text(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock' AND query ILIKE '%FROM rules%'"
                    )
                ).scalar()

        pid = wait_until(waiting_backend, 30, "the worker's matching to wait on the lock")

        # When its connection is terminated under it (then the lock goes)
        with admin.connect() as connection:
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        wait_until(
            lambda: "the database failed under it" in cluster.children[-1].output(),
            30,
            "the worker to give the event back",
        )
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
