"""What the web page (`/ui`) shows of runs over time, over plain HTTP: rules' next fire times and
recent occurrences, durations and sparklines in the runs table, step timelines and the rule
page's charts.

Real parts: PostgreSQL, Redis, a `celery worker` process and the `ade-tasks api` process.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx

from ade_tasks.clock import utcnow
from ade_tasks.db.schema import RunStepRow, ScheduleOccurrenceRow
from tests.integration.conftest import Cluster
from tests.integration.web_support import (
    add_run,
    base_url,
    check_page,
    operator,
    redis_url,
    settled,
)

__all__ = ["base_url", "operator", "redis_url"]  # the fixtures this module uses


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
