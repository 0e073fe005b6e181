"""The web page in a real browser: Debian's headless Chromium driven by Playwright against the
real `ade-tasks api` process, a real worker, PostgreSQL and Redis.

An operator logs in with a token (on a 1,366 x 768 screen, where tables use the full width),
finds a rule's required inputs marked with nothing chosen for it, starts a run from a rule's
Run-now form with typed inputs (in the order the rule declares them) and watches it finish,
retries it, cancels a running run, then approves one run waiting at a `require_human` gate and
declines another in the inbox; a viewer sees the same pages without buttons, is refused when it
posts anyway, and reads a rule's source and an older version of it with what changed since.
No page ever shows the worker's secret.
A second test looks at the charts: the runs table with durations and sparklines, a run's step
timeline while it runs (the finished step at once, the running bar growing) and after, and a
rule page's runs-per-day and p50/p95 charts, with and without JavaScript. Screenshots land in
the test's tmp dir and in `.artifacts/web-ui/` (kept after the run); the chart screenshots are
decoded and must show the bars' colours, not a blank canvas.
"""

from __future__ import annotations

import re
import shutil
import struct
import zlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from tests.conftest import REPO, write_rule
from tests.integration.conftest import Cluster, own_redis_db, require
from tests.integration.web_support import SECRET, add_run, token, write_web_rules
from tests.support import redis_db_url, wait_until

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

CHROMIUM = Path("/usr/bin/chromium")
#: As the machine's probe starts it: no sandbox (root), no GPU, and no background connections
#: (this network refuses them; without these flags Chromium retries them at every start).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO / ".artifacts" / "web-ui"
WAIT_MS = 15_000  # any one page action or expectation
RUN_MS = 45_000  # a run to reach a status


@pytest.fixture
def redis_url() -> Iterator[str]:
    """Redis DB 7, so this test can run beside the other integration tests (they use 13)."""
    yield from own_redis_db(redis_db_url(0))


@pytest.fixture
def base_url(cluster: Cluster) -> str:
    write_web_rules(cluster)
    cluster.worker(env={"WEB_SECRET": SECRET})
    return str(cluster.api().base_url)


@pytest.fixture
def browser() -> Iterator[object]:
    def chromium_present() -> None:
        if not CHROMIUM.exists():
            raise FileNotFoundError(f"{CHROMIUM} is missing; apt-get install chromium")

    require("Chromium", chromium_present)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, timeout=30_000
        )
        try:
            yield browser
        finally:
            browser.close()


class Shots:
    """Full-page screenshots, in the test's tmp dir and copied to `.artifacts/web-ui/`."""

    def __init__(self, tmp: Path, prefix: str = "") -> None:
        self.prefix = prefix  # keeps two tests' files apart in .artifacts/web-ui/
        self.dir = tmp / "screenshots"
        self.dir.mkdir()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.pages: list[str] = []

    def __call__(self, page, name: str) -> Path:  # type: ignore[no-untyped-def]
        path = self.dir / f"{self.prefix}{len(self.pages) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        shutil.copy(path, ARTIFACTS / path.name)
        self.pages.append(page.content())
        return path

    def element(self, locator, name: str) -> Path:  # type: ignore[no-untyped-def]
        """A screenshot of one element (a chart)."""
        path = self.dir / f"{self.prefix}{len(self.pages) + 1:02d}-{name}.png"
        locator.screenshot(path=str(path))
        shutil.copy(path, ARTIFACTS / path.name)
        self.pages.append(locator.page.content())
        return path


def png_pixels(path: Path) -> tuple[int, int, set[tuple[int, int, int]]]:
    """Width, height and the distinct RGB colours of an 8-bit RGB(A) PNG, as Chromium writes
    them (no imaging library needed: inflate the IDAT chunks and undo the row filters)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, chunks, header = 8, [], b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and not interlace, (depth, colour, interlace)
    channels = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks)), width * channels
    previous, colours = bytearray(stride), set()
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                guess = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + guess) & 0xFF
        colours.update((line[i], line[i + 1], line[i + 2]) for i in range(0, stride, channels))
        previous = line
    return width, height, colours


def hex_rgb(value: str) -> tuple[int, int, int]:
    return (int(value[1:3], 16), int(value[3:5], 16), int(value[5:7], 16))


def assert_shows(path: Path, *colours: str, min_width: int = 200) -> None:
    """The screenshot is a picture, not a blank: wide enough, many colours, and the given
    (CSS) colours of the chart's marks among them."""
    width, height, seen = png_pixels(path)
    assert width >= min_width and height >= 20, (path, width, height)
    assert len(seen) > 8, f"{path} looks blank: {len(seen)} colours"
    for colour in colours:
        assert hex_rgb(colour) in seen, f"{path} shows no {colour}"


#: The screen of the issue's report (issue 37, finding 6): a 1,366 px laptop.
LAPTOP = {"width": 1366, "height": 768}


def logged_in(browser, base_url: str, secret: str):  # type: ignore[no-untyped-def]
    context = browser.new_context(base_url=base_url, viewport=LAPTOP)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.goto("/ui/runs")
    expect(page).to_have_url(re.compile(r"/ui/login$"))
    page.fill("#token", secret)
    page.click("#login")
    expect(page).to_have_url(re.compile(r"/ui/runs$"))
    return page


def assert_full_width(page, selector: str) -> None:  # type: ignore[no-untyped-def]
    """The table spans the window but for the page's margins (1.2rem a side), not a column."""
    window = page.evaluate("document.documentElement.clientWidth")
    box = page.locator(selector).bounding_box()
    assert box is not None and box["width"] >= window - 40, (selector, box, window)


RELEASE_RULE = """
    id: release
    name: Release
    triggers: [{type: manual}]
    inputs:
      version: {type: string, required: true, description: the tag}
      target: {type: choice, options: [staging, prod], required: true}
      notes: {type: string}
    execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}
"""


def test_an_operator_runs_a_rule_watches_it_finish_and_accepts_a_waiting_run(
    cluster: Cluster,
    base_url: str,
    browser,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    shot = Shots(tmp_path)
    operator = token(cluster, "olivia", Role.OPERATOR)

    # Not logged in: the page sends the browser to the login form.
    context = browser.new_context(base_url=base_url)
    context.set_default_timeout(WAIT_MS)
    anonymous = context.new_page()
    anonymous.goto("/ui/runs")
    expect(anonymous).to_have_url(re.compile(r"/ui/login$"))
    anonymous.fill("#token", "not-a-token")
    anonymous.click("#login")
    expect(anonymous.locator("#login-error")).to_contain_text("unknown or revoked")
    shot(anonymous, "login-refused")
    context.close()

    page = logged_in(browser, base_url, operator)
    expect(page.locator("header .who")).to_have_text("olivia (operator)")

    # A rule with required inputs: marked, in declared order, nothing chosen for the operator,
    # and the browser will not send the form while one is empty (issue 37, finding 6).
    write_rule(cluster.tmp / "rules", "release.yaml", RELEASE_RULE)
    cluster.sync_rules(cluster.tmp / "rules")
    page.goto("/ui/rules/release/run")
    fields = page.locator("#run-form label[data-input]")
    assert fields.evaluate_all("ls => ls.map(l => l.dataset.input)") == [
        "version", "target", "notes",
    ]  # fmt: skip
    expect(page.locator("label.required .required-mark")).to_have_count(2)
    expect(page.locator('label[data-input="notes"] .required-mark')).to_have_count(0)
    expect(page.locator("#input-target")).to_have_value("")
    page.fill("#input-version", "v1.2")
    page.click("#start-run")
    expect(page).to_have_url(re.compile(r"/ui/rules/release/run$"))  # not sent
    assert page.locator("#input-target").evaluate("el => el.validity.valueMissing")
    shot(page, "run-form-required")

    # Run now, with typed inputs, and watch the run page until the run succeeded.
    page.goto("/ui/rules")
    assert_full_width(page, "#rules")
    shot(page, "rules")
    page.click('tr[data-rule="web-demo"] a.run-now')
    expect(page).to_have_url(re.compile(r"/ui/rules/web-demo/run$"))
    order = page.locator("#run-form label[data-input]").evaluate_all(
        "ls => ls.map(l => l.dataset.input)"
    )
    assert order == ["greeting", "loud", "count", "mode"]  # as web-demo.yaml declares them
    expect(page.locator("#input-greeting")).to_have_value("hello")
    page.fill("#input-greeting", "hi from chromium")
    page.check("#input-loud")
    page.fill("#input-count", "3")
    page.select_option("#input-mode", "slow")
    shot(page, "run-form")
    page.click("#start-run")
    expect(page).to_have_url(re.compile(r"/ui/runs/[0-9a-f-]{36}$"))
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=RUN_MS)
    output = page.locator("#step-0 pre")
    expect(output).to_contain_text("greeting=hi from chromium loud=true count=3 mode=slow")
    expect(output).to_contain_text("<script>alert(1)</script>")  # shown as text, not run
    expect(output).to_contain_text("token=***")
    expect(page.locator("#run-inputs")).to_contain_text("greeting=hi from chromium")
    shot(page, "run-succeeded")
    demo_run = page.url.rsplit("/", 1)[1]

    # Retry: a new run with the same inputs, which says what it retries.
    page.click("#retry-run")
    expect(page).not_to_have_url(re.compile(demo_run))
    expect(page.locator("#retry-of")).to_have_text(demo_run[:8])
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=RUN_MS)
    expect(page.locator("#step-0 pre")).to_contain_text("greeting=hi from chromium")
    retry_run = page.url.rsplit("/", 1)[1]

    # Cancel: a run whose tests step would wait 60 s stops at once, with who and why.
    page.goto("/ui/rules/chain/run")
    page.fill("#input-pause", "60")
    page.click("#start-run")
    expect(page.locator("#run-status")).to_have_text("running", timeout=RUN_MS)
    expect(page.locator("#retry-run")).to_have_count(0)  # an active run is cancelled, not retried
    page.fill("#cancel-note", "wrong branch")
    page.click("#cancel-run")
    expect(page.locator("#run-status")).to_have_text("cancelled")
    expect(page.locator("#run-error")).to_have_text("cancelled by olivia: wrong branch")
    expect(page.locator("#retry-run")).to_be_visible()
    shot(page, "run-cancelled")

    page.goto("/ui/runs?rule=web-demo")
    expect(page.locator(f'tr[data-run="{demo_run}"] .status')).to_have_text("succeeded")
    expect(page.locator(f'tr[data-run="{retry_run}"] .status')).to_have_text("succeeded")
    assert_full_width(page, "#runs")
    shot(page, "runs")
    page.goto("/ui/review")
    expect(page.locator(f'tr[data-run="{demo_run}"]')).to_be_visible()
    shot(page, "review-queue")

    # A require_human rule: its run waits for an operator.
    page.goto("/ui/rules/gated")
    page.click("#run-now")
    page.click("#start-run")
    expect(page.locator("#run-status")).to_have_text("waiting", timeout=RUN_MS)
    expect(page.locator(".pending-input")).to_contain_text("Waiting for an answer")
    shot(page, "run-waiting")
    run_url = page.url
    page.goto("/ui/rules/gated")  # a second one, to decline
    page.click("#run-now")
    page.click("#start-run")
    expect(page.locator("#run-status")).to_have_text("waiting", timeout=RUN_MS)
    declined_run = page.url.rsplit("/", 1)[1]

    # A viewer sees the waiting run, without the buttons, and its posts are refused.
    viewer = logged_in(browser, base_url, token(cluster, "vera", Role.VIEWER))
    viewer.goto(run_url)
    expect(viewer.locator(".pending-input")).to_be_visible()
    expect(viewer.locator("form.answer")).to_have_count(0)
    expect(viewer.locator("button")).to_have_count(0)
    viewer.goto("/ui/rules/web-demo")
    expect(viewer.locator("#run-now")).to_have_count(0)
    shot(viewer, "viewer-read-only")
    viewer.goto("/ui/inbox")  # the inbox, read-only
    expect(viewer.locator(".inbox-item")).to_have_count(2)
    expect(viewer.locator("form.inbox-answer")).to_have_count(0)
    viewer.goto(f"/ui/runs/{demo_run}")
    expect(viewer.locator("#run-actions")).to_have_count(0)
    page.goto("/ui/inbox")
    input_action = page.locator("form.answer").first.get_attribute("action")
    forged = (
        (input_action, {"answer": "accept"}),
        ("/ui/rules/gated/runs", {}),
        (f"/ui/runs/{demo_run}/retry", {"key": "forged"}),
        (f"/ui/runs/{declined_run}/cancel", {}),
    )
    for path, form in forged:  # the server refuses what the page did not offer
        refused = viewer.request.post(f"{base_url}{path}", form=form)
        assert refused.status == 403, (path, refused.text())
    viewer.goto(run_url)
    expect(viewer.locator("#run-status")).to_have_text("waiting")
    gated_run = run_url.rsplit("/", 1)[1]
    viewer.goto("/ui/runs?rule=gated")  # the list follows the run's status without a reload
    listed = viewer.locator(f'tr[data-run="{gated_run}"] .status')
    expect(listed).to_have_text("waiting")

    # The operator answers both in the inbox: approves one (it resumes and finishes; its page
    # follows it live) and declines the other (it ends cancelled).
    shot(page, "inbox")
    waiting = page.locator(f'.inbox-item[data-run="{gated_run}"]')
    waiting.locator("input[name=note]").fill("looks fine")
    waiting.get_by_role("button", name="Approve", exact=True).click()
    expect(page).to_have_url(re.compile(r"/ui/inbox$"))
    expect(page.locator(".inbox-item")).to_have_count(1)
    page.locator(f'.inbox-item[data-run="{declined_run}"]').get_by_role(
        "button", name="Decline", exact=True
    ).click()
    expect(page.locator("#no-approvals")).to_be_visible()
    page.goto(f"/ui/runs/{declined_run}")
    expect(page.locator("#run-status")).to_have_text("cancelled")
    expect(page.locator("#run-error")).to_have_text("rejected by olivia")
    page.goto(run_url)
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=RUN_MS)
    expect(page.locator("#step-0 pre")).to_contain_text("gated-done")
    expect(page.locator("body")).to_contain_text("accept by olivia: looks fine")
    shot(page, "run-approved")
    expect(listed).to_have_text("succeeded", timeout=RUN_MS)
    shot(viewer, "runs-live")

    # A rule's source and its versions: the release rule changed once since it was synced.
    write_rule(cluster.tmp / "rules", "release.yaml",
               RELEASE_RULE.replace("name: Release", "name: Release to a target"))  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    viewer.goto("/ui/rules/release")
    source = viewer.locator("#rule-source")
    expect(source).to_contain_text("id: release")
    expect(source).to_contain_text("name: Release to a target")
    text = source.text_content() or ""
    assert text.index("version:") < text.index("target:") < text.index("notes:"), text
    expect(viewer.locator("#rule-versions tr[data-version]")).to_have_count(2)
    shot(viewer, "rule-source")
    viewer.click('#rule-versions tr[data-version="1"] a')
    expect(viewer).to_have_url(re.compile(r"/ui/rules/release/versions/1$"))
    expect(viewer.locator("#version-source")).to_contain_text("name: Release\n")
    expect(viewer.locator("#version-diff")).to_contain_text("+name: Release to a target")
    shot(viewer, "rule-version")

    # Why did nothing run? A push to a branch no rule wants: the event's page says which
    # rule's filter refused it and what it saw (issue 36, finding 5).
    write_rule(cluster.tmp / "rules", "pushes.yaml", PUSHES_RULE)
    cluster.sync_rules(cluster.tmp / "rules")
    pushed = page.request.post(
        f"{base_url}/api/v1/ingress/events", data={"type": "git.push", "branch": "dev"}
    )
    event_id = pushed.json()["event_id"]
    event_api = f"{base_url}/api/v1/ingress/events/{event_id}"
    wait_until(
        lambda: page.request.get(event_api).json()["status"] == "dispatched",
        RUN_MS / 1000,
        "the push event to be matched",
    )
    viewer.goto("/ui/events")
    viewer.click(f'tr[data-event="{event_id}"] a')
    verdict = viewer.locator('#verdicts tr[data-rule="pushes"]')
    expect(verdict.locator(".verdict")).to_have_text("refused")
    expect(verdict).to_contain_text("branch dev matches none of main")
    shot(viewer, "event-verdicts")

    for content in shot.pages:
        assert SECRET not in content


PUSHES_RULE = """
    id: pushes
    triggers: [{type: git.push, branches: [main]}]
    execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}
"""


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
