"""The web page (`/ui`) over plain HTTP, without a browser: the login cookie, redirects and
refusals, escaping, the Run-now form, the review queue and that no secret is ever shown.

Real parts: PostgreSQL, Redis, a `celery worker` process and the `ade-tasks api` process.
"""

from __future__ import annotations

import re
import uuid

import httpx

from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from ade_tasks.db import run_views as run_views_db
from ade_tasks.db import runs as runs_db
from tests.integration.conftest import Cluster
from tests.integration.web_support import (
    add_run,
    base_url,
    browser_like,
    check_page,
    operator,
    redis_url,
    run_status,
    settled,
    token,
)

__all__ = ["base_url", "operator", "redis_url"]  # the fixtures this module uses


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
    assert "Demo &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in rules
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
    assert 'id="retry-run"' in page and 'id="cancel-run"' not in page

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

    # Retry: a double submit of the page's form starts one retry; a finished run has no cancel.
    retry_key = re.search(r'id="retry-form">\s*<input type="hidden" name="key" value="(\w+)"', page)
    assert retry_key
    retried = [
        operator.post(f"/ui/runs/{run_id}/retry", data={"key": retry_key[1]}) for _ in range(2)
    ]
    assert [r.status_code for r in retried] == [303, 303]
    assert retried[0].headers["location"] == retried[1].headers["location"] != run_url
    late = operator.post(f"/ui/runs/{run_id}/cancel", data={"note": "too late"})
    assert late.status_code == 409 and "already finished (succeeded)" in late.text


def test_domain_errors_render_readable_pages(operator: httpx.Client) -> None:
    bad = operator.post("/ui/rules/web-demo/runs", data={"in.count": "many"})
    assert bad.status_code == 422
    assert "input &#39;count&#39; must be a number" in bad.text
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
    assert operator.post(f"/ui/runs/{uuid.uuid4()}/retry", data={}).status_code == 404
    assert operator.post("/ui/runs/not-a-uuid/cancel", data={}).status_code == 404
    unknown = operator.get("/ui/rules/web-demo/versions/99")
    assert unknown.status_code == 404 and "has no version 99" in unknown.text


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


def test_run_now_is_offered_and_accepted_only_for_rules_with_a_manual_trigger(
    cluster: Cluster, operator: httpx.Client
) -> None:
    # Finding 11: "Run now" on a webhook-only rule started a run that failed on
    # `unknown variable trigger.number`.
    rules = check_page(operator.get("/ui/rules"))
    for rule_id, offered in (("web-demo", True), ("chain", True), ("hooked", False),
                             ("nightly", False)):  # fmt: skip
        row = re.search(rf'<tr data-rule="{rule_id}">.*?</tr>', rules, re.S)
        assert row, rule_id
        assert ('class="run-now"' in row[0]) is offered, rule_id
    page = check_page(operator.get("/ui/rules/hooked"))
    assert 'id="run-now"' not in page
    assert "has no <code>manual</code> trigger" in page
    form = operator.get("/ui/rules/hooked/run")
    assert form.status_code == 422
    assert "has no manual trigger" in form.text and "- type: manual" in form.text
    refused = operator.post("/ui/rules/hooked/runs", data={"key": "k1"})
    assert refused.status_code == 422
    assert "rule &#39;hooked&#39; has no manual trigger" in refused.text
    with cluster.session_factory() as session:
        rows, _ = run_views_db.list_runs(session, run_views_db.RunFilter(rule_id="hooked"))
    assert not rows


def test_the_login_form_says_where_the_dev_stacks_token_is(base_url: str) -> None:
    with browser_like(base_url) as client:
        page = check_page(client.get("/ui/login"))
    hint = re.search(r'<small id="token-hint">(.*?)</small>', page, re.S)
    assert hint and "<code>.ade/api-token</code>" in hint[1]
    assert "tokens create --name" in hint[1]


def test_a_short_run_id_opens_its_run_page(cluster: Cluster, operator: httpx.Client) -> None:
    run_id = add_run(cluster, "web-demo", utcnow(), 1.0)

    short = operator.get(f"/ui/runs/{run_id[:8]}")
    unknown = operator.get("/ui/runs/00000000")

    assert short.status_code == 303 and short.headers["location"] == f"/ui/runs/{run_id}"
    assert unknown.status_code == 404 and "no run id starts with" in unknown.text
