"""The web page (`/ui`) over plain HTTP, without a browser: the login cookie, redirects and
refusals, escaping, the Run-now form, the review queue and that no secret is ever shown.

Real parts: PostgreSQL, Redis, a `celery worker` process and the `ade-tasks api` process.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from ade_tasks.db import runs as runs_db
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.schema import Role, ScheduleOccurrenceRow
from tests.conftest import write_rule
from tests.integration.conftest import Cluster, own_redis_db
from tests.support import redis_db_url, wait_until

SECRET = "s3cr3t-web-value-9f2c"
EVIL = "<script>alert('x')</script>"


def write_web_rules(cluster: Cluster) -> None:
    """`web-demo` (typed inputs, a secret, markup in its name and output) and `gated`."""
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
        guardrails: {require_human: true}
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
    yield from own_redis_db(redis_db_url(8))


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


def test_pages_need_a_login_and_the_login_sets_a_strict_http_only_cookie(
    cluster: Cluster, base_url: str
) -> None:
    with browser_like(base_url) as client:
        for path in ("/ui/runs", "/ui/rules", "/ui/review", "/ui/runs/x", "/ui"):
            response = client.get(path)
            assert response.status_code == 303, path
            assert response.headers["location"] == "/ui/login"
        assert client.get("/ui/login").status_code == 200
        assert client.get("/ui/static/style.css").status_code == 200
        assert client.get("/ui/static/routes.py").status_code == 404  # only the listed assets

        refused = client.post("/ui/login", data={"token": "not-a-token"})
        assert refused.status_code == 401
        assert "unknown or revoked" in refused.text
        assert "ade_token" not in client.cookies

        secret = token(cluster, "olivia", Role.OPERATOR)
        response = client.post("/ui/login", data={"token": secret})
        assert response.status_code == 303
        assert response.headers["location"] == "/ui/runs"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"ade_token={secret};")
        for flag in ("HttpOnly", "Path=/", "SameSite=strict"):
            assert flag.lower() in cookie.lower(), cookie
        page = check_page(client.get("/ui/runs"))
        assert "olivia (operator)" in page
        assert secret not in page

        out = client.get("/ui/logout")
        assert out.status_code == 303
        assert (
            'ade_token=""' in out.headers["set-cookie"] or "Max-Age=0" in out.headers["set-cookie"]
        )
        assert client.get("/ui/runs").status_code == 303


def test_run_now_form_starts_a_typed_run_and_every_page_escapes_data_and_hides_the_secret(
    cluster: Cluster, operator: httpx.Client
) -> None:
    rules = check_page(operator.get("/ui/rules"))
    assert "Demo &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in rules
    assert 'href="/ui/rules/web-demo/run"' in rules
    form = check_page(operator.get("/ui/rules/web-demo/run"))
    for field in ('name="in.greeting" value="hello"', 'name="in.loud" value="true"',
                  'name="in.count" value="1"', '<option value="fast" selected>'):  # fmt: skip
        assert field in form, field
    key = re.search(r'name="key" value="([0-9a-f]+)"', form)
    assert key

    fields = {"key": key[1], "in.greeting": "hi <b>there</b>", "in.loud": "true",
              "in.count": "3", "in.mode": "slow"}  # fmt: skip
    started = operator.post("/ui/rules/web-demo/runs", data=fields)
    assert started.status_code == 303, started.text
    run_url = started.headers["location"]
    run_id = run_url.rsplit("/", 1)[1]
    again = operator.post("/ui/rules/web-demo/runs", data=fields)  # a double submit
    assert again.headers["location"] == run_url
    settled(cluster, run_id, "succeeded")

    page = check_page(operator.get(run_url))
    assert "greeting=hi &lt;b&gt;there&lt;/b&gt; loud=true count=3 mode=slow" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "token=***" in page
    assert 'id="run-status" class="status status-succeeded"' in page
    assert "pending-review" in page and "Archive" in page

    for path in ("/ui/runs", "/ui/runs?rule=web-demo&status=succeeded", "/ui/review",
                 "/ui/rules/web-demo"):  # fmt: skip
        assert run_id[:8] in check_page(operator.get(path)), path
    assert run_id[:8] not in check_page(operator.get("/ui/rules/gated"))
    assert run_id not in check_page(operator.get("/ui/runs?status=failed"))

    moved = operator.post(
        f"/ui/runs/{run_id}/review", data={"action": "archive", "back": "/ui/review"}
    )
    assert (moved.status_code, moved.headers["location"]) == (303, "/ui/review")
    with cluster.session_factory() as session:
        assert runs_db.get_run(session, run_id).queue_status == "archived"
    assert run_id[:8] not in check_page(operator.get("/ui/review"))
    assert run_id[:8] in check_page(operator.get("/ui/review?queue_status=archived"))


def test_domain_errors_render_readable_pages(operator: httpx.Client) -> None:
    bad = operator.post("/ui/rules/web-demo/runs", data={"in.count": "many"})
    assert bad.status_code == 422
    assert "input &#x27;count&#x27; must be a number" in bad.text
    missing = operator.post("/ui/rules/nope/runs", data={})
    assert missing.status_code == 404
    assert "nope" in missing.text and "text/html" in missing.headers["content-type"]
    assert operator.get("/ui/runs/not-a-uuid").status_code == 404
    assert operator.get("/ui/rules/nope").status_code == 404
    answered = operator.post("/ui/inputs/999999/answer", data={"answer": "accept"})
    assert answered.status_code == 404
    wrong = operator.post("/ui/inputs/1/answer", data={"answer": "maybe"})
    assert wrong.status_code == 422
    assert operator.get("/ui/review?queue_status=nope").status_code == 422


def test_an_operator_accepts_a_gate_and_a_viewer_sees_read_only_pages(
    cluster: Cluster, base_url: str, operator: httpx.Client
) -> None:
    started = operator.post("/ui/rules/gated/runs", data={})
    run_url = started.headers["location"]
    run_id = run_url.rsplit("/", 1)[1]
    settled(cluster, run_id, "waiting")
    page = check_page(operator.get(run_url))
    assert "Waiting for an answer" in page
    input_id = re.search(r'action="/ui/inputs/(\d+)/answer"', page)
    assert input_id
    assert 'value="accept_for_session"' not in page  # a gate, not a tool call

    with browser_like(base_url) as viewer:
        response = viewer.post("/ui/login", data={"token": token(cluster, "vera", Role.VIEWER)})
        assert response.status_code == 303
        seen = check_page(viewer.get(run_url))
        assert "Waiting for an answer" in seen
        assert "/answer" not in seen and "<button" not in seen
        assert "Run now" not in check_page(viewer.get("/ui/rules"))
        assert viewer.get("/ui/rules/gated/run").status_code == 403
        for path, data in ((f"/ui/inputs/{input_id[1]}/answer", {"answer": "accept"}),
                           ("/ui/rules/gated/runs", {}),
                           (f"/ui/runs/{run_id}/review", {"action": "archive"})):  # fmt: skip
            refused = viewer.post(path, data=data)
            assert refused.status_code == 403, path
            assert refused.headers["content-type"] == "application/problem+json"
    assert run_status(cluster, run_id) == "waiting"

    accepted = operator.post(
        f"/ui/inputs/{input_id[1]}/answer", data={"answer": "accept", "note": "ok"}
    )
    assert (accepted.status_code, accepted.headers["location"]) == (303, run_url)
    settled(cluster, run_id, "succeeded")
    page = check_page(operator.get(run_url))
    assert "gated-done" in page
    assert "accept</strong> by olivia: ok" in page


def test_rules_show_next_fire_times_and_recent_occurrences(
    cluster: Cluster, operator: httpx.Client
) -> None:
    slot = datetime(2026, 11, 29, 2, 30, tzinfo=UTC)
    with cluster.session_factory.begin() as session:
        session.add(
            ScheduleOccurrenceRow(
                rule_id="nightly", trigger_index=0, cron="30 3 * * *", slot=slot,
                claimed_by="beat-1", claimed_at=slot, outcome="skipped",
                reason="overlap <b>skip</b>", duplicate_claims=0,
            )
        )  # fmt: skip
    rules = check_page(operator.get("/ui/rules"))
    row = re.search(r'<tr data-rule="nightly">.*?</tr>', rules, re.S)
    assert row
    assert "disabled" in row[0] and "schedule" in row[0]
    # the next fire, in Paris time
    assert re.search(r"\d{4}-\d\d-\d\d 03:30\+0[12]:00", row[0]), row[0]
    assert "2026-11-29 02:30:00 UTC skipped" in row[0]

    page = check_page(operator.get("/ui/rules/nightly"))
    fires = re.findall(r"<li>(\d{4}-\d\d-\d\d 03:30\+0[12]:00)</li>", page)
    assert len(fires) == 5 and fires == sorted(fires)
    assert "overlap &lt;b&gt;skip&lt;/b&gt;" in page
    assert "Europe/Paris" in page
