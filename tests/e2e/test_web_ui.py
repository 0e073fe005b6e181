"""The web page in a real browser: Debian's headless Chromium driven by Playwright against the
real `ade-tasks api` process, a real worker, PostgreSQL and Redis.

An operator logs in with a token, starts a run from a rule's Run-now form with typed inputs and
watches it finish, then accepts a run waiting at a `require_human` gate; a viewer sees the same
pages without buttons and is refused when it posts. No page ever shows the worker's secret.
Screenshots land in the test's tmp dir and in `.artifacts/web-ui/` (kept after the run).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ade_tasks.db.schema import Role
from tests.conftest import REPO
from tests.integration.conftest import Cluster, own_redis_db, require
from tests.integration.test_web_pages import SECRET, token, write_web_rules
from tests.support import redis_db_url

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
    yield from own_redis_db(redis_db_url(7))


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

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "screenshots"
        self.dir.mkdir()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.pages: list[str] = []

    def __call__(self, page, name: str) -> None:  # type: ignore[no-untyped-def]
        path = self.dir / f"{len(self.pages) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        shutil.copy(path, ARTIFACTS / path.name)
        self.pages.append(page.content())


def logged_in(browser, base_url: str, secret: str):  # type: ignore[no-untyped-def]
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.goto("/ui/runs")
    expect(page).to_have_url(re.compile(r"/ui/login$"))
    page.fill("#token", secret)
    page.click("#login")
    expect(page).to_have_url(re.compile(r"/ui/runs$"))
    return page


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

    # Run now, with typed inputs, and watch the run page until the run succeeded.
    page.goto("/ui/rules")
    shot(page, "rules")
    page.click('tr[data-rule="web-demo"] a.run-now')
    expect(page).to_have_url(re.compile(r"/ui/rules/web-demo/run$"))
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

    page.goto("/ui/runs?rule=web-demo")
    expect(page.locator(f'tr[data-run="{demo_run}"] .status')).to_have_text("succeeded")
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

    # A viewer sees the waiting run, without the buttons, and its posts are refused.
    viewer = logged_in(browser, base_url, token(cluster, "vera", Role.VIEWER))
    viewer.goto(run_url)
    expect(viewer.locator(".pending-input")).to_be_visible()
    expect(viewer.locator("form.answer")).to_have_count(0)
    expect(viewer.locator("button")).to_have_count(0)
    viewer.goto("/ui/rules/web-demo")
    expect(viewer.locator("#run-now")).to_have_count(0)
    shot(viewer, "viewer-read-only")
    input_action = page.locator("form.answer").get_attribute("action")
    for path, form in ((input_action, {"answer": "accept"}), ("/ui/rules/gated/runs", {})):
        refused = viewer.request.post(f"{base_url}{path}", form=form)
        assert refused.status == 403, (path, refused.text())
    viewer.goto(run_url)
    expect(viewer.locator("#run-status")).to_have_text("waiting")
    gated_run = run_url.rsplit("/", 1)[1]
    viewer.goto("/ui/runs?rule=gated")  # the list follows the run's status without a reload
    listed = viewer.locator(f'tr[data-run="{gated_run}"] .status')
    expect(listed).to_have_text("waiting")

    # The operator accepts: the run resumes and finishes; the page follows it live.
    page.fill("form.answer input[name=note]", "looks fine")
    page.get_by_role("button", name="Accept", exact=True).click()
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=RUN_MS)
    expect(page.locator("#step-0 pre")).to_contain_text("gated-done")
    expect(page.locator("body")).to_contain_text("accept by olivia: looks fine")
    shot(page, "run-approved")
    expect(listed).to_have_text("succeeded", timeout=RUN_MS)
    shot(viewer, "runs-live")

    for content in shot.pages:
        assert SECRET not in content
