"""The browser tests' Chromium: Debian's headless `/usr/bin/chromium` driven by Playwright (the
module skips without Playwright), the web page's cluster on a Redis database of its own, and a
page logged in with a token on a 1,366 x 768 laptop screen.

The fixtures (`redis_url`, `base_url`, `browser`) are imported by the test modules that use them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Cluster, own_redis_db, require
from tests.integration.web_support import SECRET, write_web_rules
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
