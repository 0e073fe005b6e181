"""The web page's charts in a real browser: the runs table with durations and sparklines, a run's
step timeline while it runs (the finished step at once, the running bar growing) and after, and
a rule page's runs-per-day and p50/p95 charts, with and without JavaScript. The chart
screenshots are decoded and must show the bars' colours, not a blank canvas.

Debian's headless Chromium driven by Playwright against the real `ade-tasks api` process, a real
worker, PostgreSQL and Redis. Screenshots land in the test's tmp dir and in `.artifacts/web-ui/`
(kept after the run).
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from tests.e2e.browser_support import (
    RUN_MS,
    WAIT_MS,
    base_url,
    browser,
    expect,
    logged_in,
    redis_url,
)
from tests.e2e.screenshots import Shots, assert_shows
from tests.integration.conftest import Cluster
from tests.integration.web_support import SECRET, add_run, token

__all__ = ["base_url", "browser", "redis_url"]  # the fixtures this module uses


SUCCEEDED, FAILED, RUNNING = "#2e9e55", "#c8372d", "#2457c5"  # style.css: .bar-<status>


def axis_labels(page, chart: str) -> tuple[str, str, list[str]]:  # type: ignore[no-untyped-def]
    svg = page.locator(chart)
    x_ticks = svg.locator("text.x-tick").all_text_contents()
    return svg.locator(".x-label").text_content(), svg.locator(".y-label").text_content(), x_ticks


def test_the_charts_in_chromium_runs_table_live_timeline_and_rule_page(
    cluster: Cluster,
    base_url: str,
    browser,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    shot = Shots(tmp_path, prefix="charts-")
    now = utcnow()
    # Given a month of history for `chain` (finished runs on several days, one failure) ...
    for days, seconds, status in ((20, 3.0, "succeeded"), (20, 5.0, "succeeded"),
                                  (12, 4.0, "failed"), (5, 6.0, "succeeded"),
                                  (2, 2.0, "succeeded"), (2, 9.0, "timed_out")):  # fmt: skip
        add_run(cluster, "chain", now - timedelta(days=days), seconds, status)
    page = logged_in(browser, base_url, token(cluster, "olivia", Role.OPERATOR))

    # ... when an operator starts it with a pause in its tests step, the run page shows the
    # finished step at once, the running one growing live, and the step still to come.
    page.goto("/ui/rules/chain/run")
    page.fill("#input-pause", "6")
    page.click("#start-run")
    expect(page).to_have_url(re.compile(r"/ui/runs/[0-9a-f-]{36}$"))
    running = page.locator("#timeline rect.bar-running")
    expect(running).to_have_count(1, timeout=RUN_MS)
    expect(page.locator('#timeline g[data-step="0"] rect.bar-succeeded')).to_have_count(1)
    expect(page.locator("#timeline text.not-started")).to_have_text("not started")
    width = float(running.get_attribute("width") or 0)
    page.wait_for_function(
        "w => parseFloat(document.querySelector('#timeline rect.bar-running')"
        ".getAttribute('width')) > w + 5",
        arg=width,
        timeout=WAIT_MS,
    )
    assert_shows(shot.element(page.locator("#timeline"), "timeline-running"), SUCCEEDED, RUNNING)
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=RUN_MS)
    timeline = page.locator("#timeline")
    expect(timeline.locator("rect.bar-succeeded")).to_have_count(3)
    x_label, y_label, ticks = axis_labels(page, "#timeline")
    assert (x_label, y_label) == ("seconds since the first step started", "step")
    assert ticks[0] == "0" and len(ticks) >= 3
    expect(page.locator("#junit-1")).to_contain_text("2 passed · 0 failed · 0 errors · 1 skipped")
    assert_shows(shot(page, "run-timeline"), SUCCEEDED)
    assert_shows(shot.element(timeline, "timeline-finished"), SUCCEEDED)
    run_id = page.url.rsplit("/", 1)[1]

    # The runs table: a duration and the rule's sparkline on each row, dates on one line.
    page.goto("/ui/runs?rule=chain")
    row = page.locator(f'tr[data-run="{run_id}"]')
    expect(row.locator("td.duration")).to_have_text(re.compile(r"^\d+\.\d s$"))
    expect(row.locator("svg.sparkline circle")).to_have_count(7)
    expect(row.locator("svg.sparkline circle.current")).to_have_count(1)
    lines = row.locator("time.when").evaluate("el => el.getClientRects().length")
    assert lines == 1, "the queued date wraps"
    assert_shows(shot(page, "runs-table"))

    # The rule page: runs per day by outcome and p50/p95, labelled, drawn by the server.
    page.goto("/ui/rules/chain")
    for chart, y in (("#runs-per-day", "runs"), ("#durations-per-day", "duration")):
        x_label, y_label, ticks = axis_labels(page, chart)
        assert (x_label, y_label) == ("day (UTC)", y), chart
        assert len(ticks) >= 5 and ticks[-1] == f"{now:%m-%d}", ticks
    expect(page.locator("#runs-per-day rect.bar-failed")).to_have_count(1)
    expect(page.locator("#durations-per-day polyline.line-p95")).to_have_count(1)
    expect(page.locator("#p95")).not_to_have_text("-")
    assert_shows(shot(page, "rule-page"), SUCCEEDED, FAILED)
    assert_shows(shot.element(page.locator("#runs-per-day"), "runs-per-day"), SUCCEEDED, FAILED)
    assert_shows(shot.element(page.locator("#durations-per-day"), "durations"), RUNNING, FAILED)
    page.goto("/ui/rules/hooked")
    expect(page.locator("#run-now")).to_have_count(0)
    expect(page.locator("#no-manual")).to_contain_text("no manual trigger")

    # Without JavaScript the charts are all there: they are SVG in the page, not drawn by a script.
    context = browser.new_context(base_url=base_url, java_script_enabled=False)
    context.set_default_timeout(WAIT_MS)
    context.add_cookies([c for c in page.context.cookies() if c["name"] == "ade_token"])
    plain = context.new_page()
    plain.goto("/ui/rules/chain")
    expect(plain.locator("#runs-per-day rect.bar-succeeded")).not_to_have_count(0)
    expect(plain.locator("#durations-per-day .x-label")).to_have_text("day (UTC)")
    assert_shows(shot(plain, "rule-page-no-js"), SUCCEEDED, FAILED)
    plain.goto(f"/ui/runs/{run_id}")
    expect(plain.locator("#timeline rect.bar-succeeded")).to_have_count(3)
    context.close()
    for content in shot.pages:
        assert SECRET not in content
