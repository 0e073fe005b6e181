"""The web page's tests over plain HTTP: the rules they run (`write_web_rules`), tokens, run rows
made without running anything, a client that only a cookie authenticates, the checks every page
passes, and the fixtures (`redis_url`, `base_url`, `operator`) the test modules import.

Real parts: PostgreSQL, Redis, a `celery worker` process and the `ade-tasks api` process.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta

import httpx
import pytest

from ade_tasks.access.roles import Role
from ade_tasks.db import runs as runs_db
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.schema import RunRow
from tests.conftest import write_rule
from tests.integration.conftest import Cluster, own_redis_db
from tests.support import redis_db_url, wait_until

SECRET = "s3cr3t-web-value-9f2c"
EVIL = "<script>alert('x')</script>"


def write_web_rules(cluster: Cluster) -> None:
    """`web-demo` (typed inputs, a secret, markup in its name and output), `gated`, `chain`
    (three steps, the second a run-tests step that waits `pause` seconds), `hooked` (a webhook
    trigger only, so no "Run now") and `nightly` (a schedule)."""
    rules_dir = cluster.tmp / "rules"
    write_rule(rules_dir, "web-demo.yaml", """
        id: web-demo
        name: "Demo <script>alert('x')</script>"
        triggers: [{type: manual}]
        review_required: true
        inputs:
          greeting: {type: string, default: hello, description: what to say}
          loud: {type: boolean, default: false}
          count: {type: number, default: 1}
          mode: {type: choice, options: [fast, slow], default: fast}
        execution:
          kind: built-in
          actions:
            - id: say
              type: run-command
              command: 'echo "greeting=$ADE_INPUT_GREETING loud=$ADE_INPUT_LOUD count=$ADE_INPUT_COUNT mode=$ADE_INPUT_MODE"; echo "<script>alert(1)</script>"; echo "token=$TOKEN"'
              env: {TOKEN: "${env:WEB_SECRET}"}
        """)  # fmt: skip
    write_rule(rules_dir, "gated.yaml", """
        id: gated
        name: Gated by a human
        triggers: [{type: manual}]
        execution:
          kind: built-in
          actions:
            - id: act
              type: run-command
              command: 'echo gated-done'
        guardrails: {require_human: {requester_may_approve: true}}  # one operator starts and accepts
        """)  # fmt: skip
    write_rule(rules_dir, "chain.yaml", """
        id: chain
        name: Build, test, publish
        triggers: [{type: manual}]
        inputs:
          pause: {type: number, default: 0, description: seconds the tests step waits}
        execution:
          kind: built-in
          actions:
            - id: build
              type: run-command
              command: 'echo built'
            - id: tests
              type: run-tests
              command: |
                sleep "$ADE_INPUT_PAUSE"
                printf '%s' '<testsuite name="t"><testcase classname="t" name="a"/><testcase classname="t" name="b"/><testcase classname="t" name="c"><skipped/></testcase></testsuite>' > "$ADE_JUNIT_XML"
            - id: publish
              type: run-command
              command: 'echo published'
        """)  # fmt: skip
    write_rule(rules_dir, "hooked.yaml", """
        id: hooked
        name: On a custom webhook only
        triggers: [{type: webhook, hook: deploys}]
        execution:
          kind: built-in
          actions: [{type: run-command, command: 'echo "number={{trigger.body.number}}"'}]
        """)  # fmt: skip
    write_rule(rules_dir, "nightly.yaml", """
        id: nightly
        enabled: false
        triggers: [{type: schedule, cron: "30 3 * * *", timezone: Europe/Paris}]
        execution: {kind: built-in, actions: [{type: run-command, command: "echo nightly"}]}
        """)  # fmt: skip
    cluster.sync_rules(rules_dir)


def token(cluster: Cluster, name: str, role: Role) -> str:
    with cluster.session_factory.begin() as session:
        _, secret = tokens_db.create_token(session, name, role, "tests")
    return secret


def run_status(cluster: Cluster, run_id: str) -> str:
    with cluster.session_factory() as session:
        return runs_db.get_run(session, run_id).status


def settled(cluster: Cluster, run_id: str, status: str, timeout: float = 30) -> None:
    try:
        wait_until(lambda: run_status(cluster, run_id) == status, timeout, f"run {run_id} {status}")
    except AssertionError:
        logs = "\n".join(child.output()[-3000:] for child in cluster.children)
        raise AssertionError(
            f"run {run_id} is {run_status(cluster, run_id)}, not {status}:\n{logs}"
        ) from None


@pytest.fixture
def redis_url() -> Iterator[str]:
    """Redis DB 8 rather than the shared 13, so this module can run beside other integration
    tests (their workers would take this module's messages, and theirs flush 13)."""
    yield from own_redis_db(redis_db_url(1))


@pytest.fixture
def base_url(cluster: Cluster) -> str:
    write_web_rules(cluster)
    cluster.worker(env={"WEB_SECRET": SECRET})
    return str(cluster.api().base_url)


def browser_like(base_url: str) -> httpx.Client:
    """A client with no Authorization header: only the cookie authenticates it."""
    return httpx.Client(base_url=base_url, timeout=10, follow_redirects=False)


@pytest.fixture
def operator(cluster: Cluster, base_url: str) -> Iterator[httpx.Client]:
    with browser_like(base_url) as client:
        response = client.post("/ui/login", data={"token": token(cluster, "olivia", Role.OPERATOR)})
        assert response.status_code == 303, response.text
        yield client


def check_page(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert SECRET not in response.text
    assert "<script>alert" not in response.text  # every piece of data is escaped
    return response.text


def add_run(
    cluster: Cluster,
    rule: str,
    queued: datetime,
    seconds: float | None,
    status: str = "succeeded",
    version: int = 1,
) -> str:
    """A run row as the worker leaves it, without running anything (for history and charts)."""
    run_id = str(uuid.uuid4())
    started = queued + timedelta(seconds=1)
    with cluster.session_factory.begin() as session:
        session.add(
            RunRow(
                id=run_id, rule_id=rule, rule_version=version, trigger_type="manual",
                trigger={}, idempotency_key=run_id, status=status, billing_code=f"auto:{rule}",
                usage={}, queue="ade.builtin", queued_at=queued, started_at=started,
                finished_at=started + timedelta(seconds=seconds) if seconds is not None else None,
            )
        )  # fmt: skip
    return run_id
