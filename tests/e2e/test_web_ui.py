"""The web page in a real browser: an operator's and a viewer's day.

An operator logs in with a token (on a 1,366 x 768 screen, where tables use the full width),
finds a rule's required inputs marked with nothing chosen for it, starts a run from a rule's
Run-now form with typed inputs (in the order the rule declares them) and watches it finish,
retries it, cancels a running run, then approves one run waiting at a `require_human` gate and
declines another in the inbox; a viewer sees the same pages without buttons, is refused when it
posts anyway, and reads a rule's source and an older version of it with what changed since.
No page ever shows the worker's secret.

Debian's headless Chromium driven by Playwright against the real `ade-tasks api` process, a real
worker, PostgreSQL and Redis. Screenshots land in the test's tmp dir and in `.artifacts/web-ui/`
(kept after the run).
"""

from __future__ import annotations

import re
from pathlib import Path

from ade_tasks.access.roles import Role
from tests.conftest import write_rule
from tests.e2e.browser_support import (
    RUN_MS,
    WAIT_MS,
    assert_full_width,
    base_url,
    browser,
    expect,
    logged_in,
    redis_url,
)
from tests.e2e.screenshots import Shots
from tests.integration.conftest import Cluster
from tests.integration.web_support import SECRET, token
from tests.support import wait_until

__all__ = ["base_url", "browser", "redis_url"]  # the fixtures this module uses


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


PUSHES_RULE = """
    id: pushes
    triggers: [{type: git.push, branches: [main]}]
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
