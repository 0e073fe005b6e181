"""The web page's part of one-shot schedules, pauses, the kill switch and rule health, over
plain HTTP as a browser posts its forms: scheduling from the Run-now form, the scheduled-runs
page and its cancel button, pause and resume with a note, the kill-switch banner and "force",
health on the rules pages and the enable button that answers with the setup error.

Real parts: PostgreSQL, Redis, a `celery worker`, an `ade-tasks beat` (for cancel-after-fire)
and the `ade-tasks api` process; the client sends only the login cookie.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, timedelta, timezone

import httpx
import pytest
from sqlalchemy import select

from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from ade_tasks.db.schema import AuditRow, RulePauseRow, RunRow, ScheduledRunRow
from tests.conftest import write_rule
from tests.integration.conftest import Cluster, own_redis_db
from tests.integration.web_support import browser_like, check_page, token, write_web_rules
from tests.support import redis_db_url, wait_until


@pytest.fixture
def redis_url() -> Iterator[str]:
    """Redis DB 10, so this module can run beside the other web tests (DB 8)."""
    yield from own_redis_db(redis_db_url(3))


@pytest.fixture
def base_url(cluster: Cluster) -> str:
    write_web_rules(cluster)
    write_rule(cluster.tmp / "rules", "reviews.yaml", """
        id: reviews
        enabled: false
        triggers: [{type: github.pr_opened, repo: acme/api}]
        execution: {kind: built-in, actions: [{type: run-command, command: "echo review"}]}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    cluster.worker()
    return str(cluster.api().base_url)


@contextmanager
def logged_in(base_url: str, secret: str) -> Iterator[httpx.Client]:
    """A browser-like client holding the login cookie of `secret`."""
    with browser_like(base_url) as client:
        response = client.post("/ui/login", data={"token": secret})
        assert response.status_code == 303, response.text
        yield client


@pytest.fixture
def operator(cluster: Cluster, base_url: str) -> Iterator[httpx.Client]:
    with logged_in(base_url, token(cluster, "olivia", Role.OPERATOR)) as client:
        yield client


@pytest.fixture
def admin(cluster: Cluster, base_url: str) -> Iterator[httpx.Client]:
    with logged_in(base_url, cluster.env["ADE_API_TOKEN"]) as client:  # the token "tests"
        yield client


def scheduled_rows(cluster: Cluster) -> list[ScheduledRunRow]:
    with cluster.session_factory() as session:
        return list(session.scalars(select(ScheduledRunRow).order_by(ScheduledRunRow.run_at)))


def run_count(cluster: Cluster) -> int:
    with cluster.session_factory() as session:
        return len(session.scalars(select(RunRow.id)).all())


def form_key(client: httpx.Client, rule_id: str) -> str:
    found = re.search(
        r'name="key" value="([0-9a-f]+)"', check_page(client.get(f"/ui/rules/{rule_id}/run"))
    )
    assert found
    return found[1]


def test_the_run_form_schedules_a_run_at_a_zoned_time_or_after_a_delay_and_lists_it(
    cluster: Cluster, operator: httpx.Client
) -> None:
    # Given the Run-now form of a rule with typed inputs
    form = check_page(operator.get("/ui/rules/web-demo/run"))
    assert 'name="run_at"' in form and 'name="delay_seconds"' in form
    assert 'name="force"' not in form and 'id="kill-switch"' not in form  # the switch is off
    at = (utcnow() + timedelta(hours=3)).astimezone(timezone(timedelta(hours=1)))
    at = at.replace(microsecond=0)
    key = form_key(operator, "web-demo")

    # When it is posted with a time (with an offset), twice (a double submit), and with "10m"
    fields = {"key": key, "in.greeting": "later", "run_at": at.isoformat()}
    first = operator.post("/ui/rules/web-demo/runs", data=fields)
    again = operator.post("/ui/rules/web-demo/runs", data=fields)
    posted = utcnow()
    delayed = operator.post(
        "/ui/rules/web-demo/runs",
        data={"key": form_key(operator, "web-demo"), "delay_seconds": "10m"},
    )

    # Then two scheduled runs exist (the double submit stored one), pending, with their times,
    # and the rule's page confirms and lists them with a Cancel button; no run started
    rows = scheduled_rows(cluster)
    assert len(rows) == 2, rows
    later, soon = sorted(rows, key=lambda r: r.run_at, reverse=True)
    assert later.run_at == at.astimezone(UTC) and later.inputs["greeting"] == "later"
    assert abs((soon.run_at - posted).total_seconds() - 600) < 10
    assert {r.status for r in rows} == {"pending"} and {r.requested_by for r in rows} == {"olivia"}
    assert first.status_code == 303
    assert first.headers["location"] == f"/ui/rules/web-demo?scheduled={later.id}#scheduled"
    assert again.headers["location"] == first.headers["location"]
    assert delayed.headers["location"].startswith(f"/ui/rules/web-demo?scheduled={soon.id}")
    page = check_page(operator.get(first.headers["location"].split("#")[0]))
    assert 'id="just-scheduled"' in page and later.id[:8] in page
    for row in rows:
        listed = re.search(rf'<tr data-scheduled="{row.id}">.*?</tr>', page, re.S)
        assert listed and "Cancel" in listed[0] and "pending" in listed[0]
    everything = check_page(operator.get("/ui/scheduled"))
    assert all(f'data-scheduled="{row.id}"' in everything for row in rows)
    assert run_count(cluster) == 0


BAD_TIMES = [
    ({"run_at": "2026-12-24T18:00:00"}, "run_at: run_at 2026-12-24T18:00:00 has no time zone"),
    ({"run_at": "2020-01-01T00:00:00Z"}, "in the past"),
    ({"run_at": "tomorrow"}, "is not an ISO 8601 timestamp"),
    ({"run_at": "2030-01-01T00:00:00Z", "delay_seconds": "10m"}, "not both"),
    ({"delay_seconds": "soon"}, "delay_seconds: &#39;soon&#39; is not a duration"),
    ({"delay_seconds": "-5"}, "delay_seconds"),
]


def test_a_bad_time_or_delay_is_refused_with_the_field_and_nothing_is_scheduled(
    cluster: Cluster, operator: httpx.Client
) -> None:
    for fields, words in BAD_TIMES:
        refused = operator.post("/ui/rules/web-demo/runs", data={"key": "k-bad", **fields})
        assert refused.status_code == 422, (fields, refused.text)
        assert words in refused.text, (fields, refused.text)
    assert scheduled_rows(cluster) == [] and run_count(cluster) == 0


def test_a_scheduled_run_is_cancelled_before_it_fires_and_refused_with_409_after(
    cluster: Cluster, operator: httpx.Client
) -> None:
    # Given two scheduled runs: one in an hour, one due now with a beat running
    operator.post("/ui/rules/web-demo/runs", data={"key": "k-later", "delay_seconds": "1h"})
    operator.post("/ui/rules/chain/runs", data={"key": "k-now", "delay_seconds": "0"})
    later = next(r for r in scheduled_rows(cluster) if r.rule_id == "web-demo")
    cluster.beat()
    fired = wait_until(
        lambda: next(
            (r for r in scheduled_rows(cluster) if r.rule_id == "chain" and r.run_id), None
        ),
        30,
        "the beat to fire the due scheduled run",
    )

    # When an operator cancels each from the scheduled-runs page
    cancelled = operator.post(f"/ui/scheduled/{later.id}/cancel", data={"back": "/ui/scheduled"})
    too_late = operator.post(f"/ui/scheduled/{fired.id}/cancel", data={"back": "/ui/scheduled"})

    # Then the pending one is cancelled by its operator; the fired one answers 409, saying why
    assert (cancelled.status_code, cancelled.headers["location"]) == (303, "/ui/scheduled")
    after = {r.id: r for r in scheduled_rows(cluster)}
    assert after[later.id].status == "cancelled"
    assert after[later.id].reason == "cancelled by olivia"
    assert too_late.status_code == 409 and "text/html" in too_late.headers["content-type"]
    assert f"is fired as run {fired.run_id}, so it can no longer be cancelled" in too_late.text
    assert "ade-tasks runs cancel RUN" in too_late.text
    assert after[fired.id].status == "fired"
    listed = check_page(operator.get("/ui/scheduled?status=fired"))
    assert f'data-scheduled="{fired.id}"' in listed and fired.run_id[:8] in listed
    assert f'data-scheduled="{later.id}"' not in check_page(operator.get("/ui/scheduled"))


def test_an_operator_pauses_and_resumes_a_rule_or_one_trigger_with_a_note(
    cluster: Cluster, operator: httpx.Client
) -> None:
    # Given the rule page of a scheduled rule, with its pause form
    page = check_page(operator.get("/ui/rules/nightly"))
    assert 'id="pause-form"' in page and '<option value="0">trigger #0 (schedule)</option>' in page

    # When the whole rule is paused with a note, and then its trigger #0 too
    whole = operator.post(
        "/ui/rules/nightly/pause", data={"trigger_index": "", "note": "freeze <b>"}
    )
    one = operator.post("/ui/rules/nightly/pause", data={"trigger_index": "0", "note": "db move"})

    # Then the rule page shows who paused what, when and why; the rules list says paused
    assert (whole.status_code, whole.headers["location"]) == (303, "/ui/rules/nightly#pauses")
    assert one.status_code == 303
    page = check_page(operator.get("/ui/rules/nightly"))
    rule_pause = re.search(r'<div class="box pause" data-pause="rule">.*?</div>', page, re.S)
    assert rule_pause, page
    text = " ".join(re.sub(r"<[^>]+>", " ", rule_pause[0]).split())
    assert re.search(
        r"The whole rule is paused by olivia since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text
    )
    assert "freeze &lt;b&gt;" in rule_pause[0] and "Resume" in rule_pause[0]
    assert 'data-pause="0"' in page and "db move" in page
    rules = check_page(operator.get("/ui/rules"))
    row = re.search(r'<tr data-rule="nightly">.*?</tr>', rules, re.S)
    assert row and 'title="freeze &lt;b&gt;">paused</span>' in row[0]

    # When the whole rule is resumed
    resumed = operator.post("/ui/rules/nightly/resume", data={"trigger_index": ""})

    # Then only the trigger's pause is left, and each post is in the audit log under olivia
    assert resumed.status_code == 303
    with cluster.session_factory() as session:
        left = session.scalars(select(RulePauseRow.trigger_index)).all()
        audit = session.execute(
            select(AuditRow.actor, AuditRow.method, AuditRow.path, AuditRow.status_code).where(
                AuditRow.path.like("/ui/rules/nightly/%")
            )
        ).all()
    assert left == [0]
    assert ("olivia", "POST", "/ui/rules/nightly/pause", 303) in audit
    assert ("olivia", "POST", "/ui/rules/nightly/resume", 303) in audit
    again = operator.post("/ui/rules/nightly/resume", data={"trigger_index": ""})
    assert again.status_code == 404 and "is not paused, so there is nothing to resume" in again.text


BAD_PAUSES = [
    ("nightly", {}, 422, "needs a note saying why (note: is empty)"),
    ("nightly", {"note": "  "}, 422, "needs a note saying why (note: is empty)"),
    ("nightly", {"trigger_index": "x", "note": "n"}, 422, "trigger_index &#39;x&#39; is not"),
    ("nightly", {"trigger_index": "4", "note": "n"}, 422, "has no trigger #4 (trigger_index"),
    ("web-demo", {"trigger_index": "0", "note": "n"}, 422, "manual runs are never paused"),
    ("nope", {"note": "n"}, 404, "nope"),
]


def test_a_bad_pause_is_refused_with_the_field_and_nothing_is_paused(
    cluster: Cluster, operator: httpx.Client
) -> None:
    for rule_id, fields, status, words in BAD_PAUSES:
        refused = operator.post(f"/ui/rules/{rule_id}/pause", data=fields)
        assert refused.status_code == status, (fields, refused.text)
        assert words in refused.text and "text/html" in refused.headers["content-type"]
    with cluster.session_factory() as session:
        assert session.scalars(select(RulePauseRow)).all() == []


def test_a_viewer_sees_no_controls_and_is_refused_every_post(
    cluster: Cluster, base_url: str, operator: httpx.Client
) -> None:
    operator.post("/ui/rules/web-demo/runs", data={"key": "k-v", "delay_seconds": "1h"})
    operator.post("/ui/rules/nightly/pause", data={"note": "held"})
    (scheduled,) = scheduled_rows(cluster)
    with logged_in(base_url, token(cluster, "vera", Role.VIEWER)) as viewer:
        page = check_page(viewer.get("/ui/rules/nightly"))
        assert "held" in page and "pause-form" not in page and "Resume" not in page
        listed = check_page(viewer.get("/ui/scheduled"))
        assert f'data-scheduled="{scheduled.id}"' in listed and "cancel-scheduled" not in listed
        for path, data in (
            ("/ui/rules/web-demo/runs", {"delay_seconds": "10m"}),
            (f"/ui/scheduled/{scheduled.id}/cancel", {}),
            ("/ui/rules/nightly/pause", {"note": "mine"}),
            ("/ui/rules/nightly/resume", {}),
            ("/ui/rules/reviews/enable", {"force": "true"}),
        ):
            refused = viewer.post(path, data=data)
            assert refused.status_code == 403, path
            assert refused.headers["content-type"] == "application/problem+json"
            assert "needs the operator role; token 'vera' has viewer" in refused.text
    assert [r.status for r in scheduled_rows(cluster)] == ["pending"]
    with cluster.session_factory() as session:
        (pause,) = session.scalars(select(RulePauseRow)).all()
    assert pause.note == "held"


def test_rule_health_is_shown_and_enabling_a_rule_that_cannot_fire_needs_force(
    cluster: Cluster, operator: httpx.Client, admin: httpx.Client
) -> None:
    # Given a github rule while ADE_GITHUB__WEBHOOK_SECRET is unset and no poller runs
    rules = check_page(operator.get("/ui/rules"))
    reviews = re.search(r'<tr data-rule="reviews">.*?</tr>', rules, re.S)
    demo = re.search(r'<tr data-rule="web-demo">.*?</tr>', rules, re.S)
    assert reviews and demo
    assert "not-ready" in reviews[0]
    assert (
        "ADE_GITHUB__WEBHOOK_SECRET is not set; set it or run `ade-tasks poll github`" in reviews[0]
    )
    assert "ready: manual run (API, CLI)" in demo[0]
    page = check_page(admin.get("/ui/rules/reviews"))
    trigger = re.search(r'<tr data-trigger="0">.*?</tr>', page, re.S)
    assert trigger and "github.pr_opened" in trigger[0] and "is not set" in trigger[0]
    assert 'id="enable-force"' in page
    assert 'id="enable"' not in check_page(operator.get("/ui/rules/reviews"))  # admins only

    # When an operator, then an admin without and with "enable anyway", enable it
    by_operator = operator.post("/ui/rules/reviews/enable", data={"force": "true"})
    unforced = admin.post("/ui/rules/reviews/enable", data={})
    enabled_now = lambda: check_page(admin.get("/ui/rules/reviews"))  # noqa: E731
    assert 'id="rule-enabled">no' in enabled_now()
    forced = admin.post("/ui/rules/reviews/enable", data={"force": "true"})

    # Then the operator is refused (admin only, as the API), the admin is answered with the
    # setup error, and only the forced enable took; disable turns it off again
    assert by_operator.status_code == 403 and "needs an admin token" in by_operator.text
    assert unforced.status_code == 409
    assert (
        "rule &#39;reviews&#39; cannot fire: triggers.0 (github.pr_opened): GitHub" in unforced.text
    )
    assert forced.status_code == 303 and 'id="rule-enabled">yes' in enabled_now()
    disabled = admin.post("/ui/rules/reviews/disable", data={})
    assert disabled.status_code == 303 and 'id="rule-enabled">no' in enabled_now()


def test_the_kill_switch_shows_a_banner_on_every_page_and_only_an_admin_may_force_a_run(
    cluster: Cluster,
) -> None:
    # Given an API process started with ADE_DISABLE_AUTOMATIONS=1
    write_web_rules(cluster)
    off = str(cluster.api(env={"ADE_DISABLE_AUTOMATIONS": "1"}).base_url)
    with (
        logged_in(off, token(cluster, "olivia", Role.OPERATOR)) as operator,
        logged_in(off, cluster.env["ADE_API_TOKEN"]) as admin,
    ):
        # Then every page carries the banner, saying what it means and how to turn it off
        for path in ("/ui/runs", "/ui/rules", "/ui/rules/chain", "/ui/scheduled", "/ui/review"):
            banner = re.search(
                r'<div class="banner error" id="kill-switch".*?</div>',
                check_page(operator.get(path)),
                re.S,
            )
            assert banner, path
            assert "no trigger creates runs" in banner[0]
            assert "unset ADE_DISABLE_AUTOMATIONS and restart the processes" in banner[0]
            assert "force one manual run from its Run now form" in banner[0]
        assert 'id="kill-switch"' in check_page(operator.get("/ui/login"))

        # And only an admin's run form offers force
        assert 'name="force"' not in check_page(operator.get("/ui/rules/chain/run"))
        assert 'name="force"' in check_page(admin.get("/ui/rules/chain/run"))

        # When the operator forces, the admin runs without force, the admin forces
        by_operator = operator.post("/ui/rules/chain/runs", data={"key": "k1", "force": "true"})
        unforced = admin.post("/ui/rules/chain/runs", data={"key": "k2"})
        forced = admin.post("/ui/rules/chain/runs", data={"key": "k3", "force": "true"})

    # Then the operator is refused, the plain run is refused with the kill switch's words, and
    # the forced run starts, recording who forced it
    assert by_operator.status_code == 403 and "only an admin token may force" in by_operator.text
    assert forced.status_code == 303, forced.text
    run_id = forced.headers["location"].rsplit("/", 1)[1]
    with cluster.session_factory() as session:
        runs = list(session.scalars(select(RunRow)))
    assert [(r.id, r.trigger["forced_by"]) for r in runs] == [(run_id, "tests")]
    assert unforced.status_code == 409, unforced.text
    assert "not run: automations are disabled on this cluster (ADE_DISABLE_AUTOMATIONS=1)" in (
        unforced.text
    )
