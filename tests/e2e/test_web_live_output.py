"""A run page shows a running step's output as it is printed (issue 37, finding 1), in Debian's
headless Chromium against a real `ade-tasks api`, a real worker, PostgreSQL and Redis.

The step waits for the page to be open, prints a line and half of a secret, then waits for a
file the test creates: the open page (not reloaded) must show the line before the file exists
(its EventSource follows the run's `step.output` events), never any part of the secret, and
once released the step's stored, masked output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ade_tasks.access.roles import Role
from tests.e2e.browser_support import RUN_MS, browser, logged_in, redis_url  # noqa: F401
from tests.integration.conftest import Cluster
from tests.integration.test_live_output import LIVE, LIVE_STEP, SECRET
from tests.integration.test_run_path import add_rule
from tests.integration.test_runs_api import start
from tests.integration.web_support import token
from tests.support import wait_until

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect


def test_the_run_page_shows_a_running_steps_output_as_it_is_printed(
    cluster: Cluster,
    project: Path,
    browser,  # type: ignore[no-untyped-def]  # noqa: F811
) -> None:
    # Given a step that prints, then waits for the test, on a real worker and API
    (project / "live.sh").write_text("while [ ! -e go ]; do sleep 0.05; done\n" + LIVE)
    add_rule(cluster, "live", LIVE_STEP)
    cluster.worker(env={"LIVE_SECRET": SECRET})
    api = cluster.api()
    run_id = start(cluster, "live")
    # its step running, so the page's status signature stays as drawn until the step ends
    wait_until(
        lambda: [s["status"] for s in api.get(f"/api/v1/runs/{run_id}").json()["steps"]]
        == ["running"],
        30,
        "the step to start",
    )
    base_url = str(api.base_url)
    # When an operator opens its page while the step runs
    page = logged_in(browser, base_url, token(cluster, "olivia", Role.OPERATOR))
    page.goto(f"/ui/runs/{run_id}")
    live = page.locator("#live-output-0")
    expect(live).to_have_text("")
    page.evaluate("window.notReloaded = true")
    (project / "go").touch()
    # Then the step's output appears in the open page while the step still waits, with no
    # part of the secret
    expect(live).to_contain_text("first line", timeout=RUN_MS)
    assert page.evaluate("window.notReloaded === true")
    expect(live).to_contain_text("token=", timeout=RUN_MS)
    assert not (project / "release").exists()
    assert SECRET[:5] not in page.content()
    # When the step is released, the page shows its stored output, masked
    (project / "release").touch()
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=RUN_MS)
    expect(page.locator("#step-0 pre")).to_have_text("first line\ntoken=***\n")
    assert SECRET[:5] not in page.content() and "2secret" not in page.content()
