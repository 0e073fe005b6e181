"""The web page (`/ui`) over plain HTTP, without a browser: the login cookie, redirects and
refusals, escaping, the Run-now form, the review queue and that no secret is ever shown.

Real parts: PostgreSQL, Redis, a `celery worker` process and the `ade-tasks api` process.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from ade_tasks.db import run_views as run_views_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.schema import RunRow, RunStepRow, ScheduleOccurrenceRow
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
    assert "2026-11-29 02:30:00 UTC skipped" in re.sub(r"<[^>]+>", "", row[0])

    page = check_page(operator.get("/ui/rules/nightly"))
    fires = re.findall(r"<li>(\d{4}-\d\d-\d\d 03:30\+0[12]:00)</li>", page)
    assert len(fires) == 5 and fires == sorted(fires)
    assert "overlap &lt;b&gt;skip&lt;/b&gt;" in page
    assert "Europe/Paris" in page


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


def test_the_runs_table_shows_durations_and_a_sparkline_of_each_rules_recent_runs(
    cluster: Cluster, operator: httpx.Client
) -> None:
    now = utcnow()
    ids = [add_run(cluster, "web-demo", now - timedelta(minutes=9 - i), 2.0 + i) for i in range(4)]
    running = add_run(cluster, "gated", now - timedelta(seconds=30), None, "running")
    page = check_page(operator.get("/ui/runs"))
    assert "<th>Duration</th>" in page and "<th>Recent durations</th>" in page
    newest = re.search(rf'<tr data-run="{ids[-1]}">.*?</tr>', page, re.S)
    assert newest
    assert '<td class="duration">5.0 s</td>' in newest[0]
    spark = re.search(r'<svg class="sparkline".*?</svg>', newest[0], re.S)
    assert spark and "<title>last 4 runs: 2.0 s to 5.0 s</title>" in spark[0]
    assert spark[0].count("<circle") == 4 and spark[0].count('class="current"') == 1
    assert re.search(r'<time class="when" datetime="\d{4}-', newest[0])  # never wraps (CSS)
    active = re.search(rf'<tr data-run="{running}">.*?</tr>', page, re.S)
    assert active and re.search(r'<td class="duration">\d+\.\d s so far</td>', active[0])
    assert "<svg" not in active[0]  # gated has no finished run to draw


def test_a_running_runs_page_has_a_timeline_of_finished_running_and_coming_steps(
    cluster: Cluster, operator: httpx.Client
) -> None:
    # Finding 11: "a running run shows only its current step".
    start = utcnow() - timedelta(seconds=20)
    run_id = add_run(cluster, "chain", start - timedelta(seconds=1), None, "running")
    result = {"passed": 7, "failed": 1, "errors": 0, "skipped": 2, "total": 10}
    with cluster.session_factory.begin() as session:
        session.add_all([
            RunStepRow(run_id=run_id, index=0, step_id="build", action_type="run-command",
                       status="succeeded", started_at=start,
                       finished_at=start + timedelta(seconds=4), output="built", result={}),
            RunStepRow(run_id=run_id, index=1, step_id="tests", action_type="run-tests",
                       status="running", started_at=start + timedelta(seconds=4),
                       result=result),
        ])  # fmt: skip
    page = check_page(operator.get(f"/ui/runs/{run_id}"))
    svg = re.search(r'<svg id="timeline".*?</svg>', page, re.S)
    assert svg, page
    chart = svg[0]
    assert "<title>Step timeline: 3 steps</title>" in chart
    assert re.search(
        r'<rect class="bar bar-succeeded" [^>]*><title>1\. build: succeeded, 4\.0 s', chart
    )
    assert re.search(r'<rect class="bar bar-running running" ', chart)
    assert re.search(r'<text class="step-label"[^>]*>3\. publish</text>', chart)
    assert '<text class="not-started"' in chart and "not started" in chart
    assert "seconds since the first step started" in chart  # the x axis is labelled
    assert "data-live-run" in page and "/ui/static/live.js" in page
    junit = re.search(r'<p class="junit" id="junit-1">(.*?)</p>', page, re.S)
    assert junit
    text = re.sub(r"<[^>]+>", "", junit[1])
    assert " ".join(text.split()) == "7 passed · 1 failed · 0 errors · 2 skipped of 10 tests"


def test_a_finished_chain_shows_every_step_on_its_timeline_with_junit_counts(
    cluster: Cluster, operator: httpx.Client
) -> None:
    form = check_page(operator.get("/ui/rules/chain/run"))
    key = re.search(r'name="key" value="([0-9a-f]+)"', form)
    assert key
    started = operator.post("/ui/rules/chain/runs", data={"key": key[1], "in.pause": "0"})
    assert started.status_code == 303, started.text
    run_id = started.headers["location"].rsplit("/", 1)[1]
    settled(cluster, run_id, "succeeded")
    page = check_page(operator.get(f"/ui/runs/{run_id}"))
    chart = re.search(r'<svg id="timeline".*?</svg>', page, re.S)
    assert chart
    assert chart[0].count('<rect class="bar bar-succeeded"') == 3
    assert "running" not in chart[0] and "not started" not in chart[0]
    assert "data-live-run" not in page
    junit = re.search(r'<p class="junit" id="junit-1">(.*?)</p>', page, re.S)
    assert junit and "2 passed" in junit[1] and "1 skipped" in junit[1]


def test_the_rule_page_charts_runs_per_day_and_p50_p95_over_thirty_days(
    cluster: Cluster, operator: httpx.Client
) -> None:
    today = utcnow().replace(hour=0, minute=5, second=0, microsecond=0)
    add_run(cluster, "nightly", today - timedelta(days=40), 99.0)  # outside the window
    for seconds in (2.0, 4.0, 6.0):
        add_run(cluster, "nightly", today - timedelta(days=2), seconds)
    add_run(cluster, "nightly", today - timedelta(days=2), 1.0, "failed")
    fired = add_run(cluster, "nightly", today, 8.0)
    with cluster.session_factory.begin() as session:
        session.add(
            ScheduleOccurrenceRow(
                rule_id="nightly", trigger_index=0, cron="30 3 * * *", slot=today,
                claimed_by="beat-1", claimed_at=today, outcome="fired", run_id=fired,
                duplicate_claims=0,
            )
        )  # fmt: skip
    page = check_page(operator.get("/ui/rules/nightly"))
    per_day = re.search(r'<svg id="runs-per-day".*?</svg>', page, re.S)
    assert per_day
    day = (today - timedelta(days=2)).date().isoformat()
    assert f"<title>{day}: 3 succeeded</title>" in per_day[0]
    assert f"<title>{day}: 1 failed</title>" in per_day[0]
    assert "<title>Runs per day by outcome: 5 runs</title>" in per_day[0]
    for label in (">day (UTC)</text>", ">runs</text>", f">{today:%m-%d}</text>"):
        assert label in per_day[0], label
    durations = re.search(r'<svg id="durations-per-day".*?</svg>', page, re.S)
    assert durations
    assert f"<title>{day}: p50 3.0 s (4 runs)</title>" in durations[0]
    assert ">duration</text>" in durations[0] and 'class="line line-p95"' in durations[0]
    assert re.search(r'p50 <strong id="p50">4\.0 s</strong> · p95 <strong id="p95">7\.6 s', page)
    occurrence = re.search(r'<table id="occurrences">.*?</table>', page, re.S)
    assert occurrence and fired[:8] in occurrence[0]
    assert '<span class="status status-succeeded">succeeded</span>' in occurrence[0]


def test_a_short_run_id_opens_its_run_page(cluster: Cluster, operator: httpx.Client) -> None:
    run_id = add_run(cluster, "web-demo", utcnow(), 1.0)

    short = operator.get(f"/ui/runs/{run_id[:8]}")
    unknown = operator.get("/ui/runs/00000000")

    assert short.status_code == 303 and short.headers["location"] == f"/ui/runs/{run_id}"
    assert unknown.status_code == 404 and "no run id starts with" in unknown.text
