"""Rule health through the real `ade-tasks api` process (PostgreSQL, Redis), with real beat and
poller processes as the live state (issue 16, finding 2): each rule answer carries its
`health`, enabling a rule that cannot fire is refused with 409 unless forced, `ade_rule_ready`
reports it, and `rules list` / `rules show` / `rules enable --force` print it. A pause holds a
rule's health and shows in every view; a poller whose every poll fails is no path (issue 37,
findings 2 and 3)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import httpx

from ade_tasks.clock import utcnow
from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.triggers.readiness import GITHUB_REFUSED, NO_BEAT
from tests.conftest import write_rule
from tests.fake_http import ScriptedServer
from tests.integration.conftest import Cluster
from tests.integration.test_cli_cluster import cli
from tests.support import BIN, Child, wait_until

BUILTIN = {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]}
AGENT = {"kind": "agent-session", "provider": "openai", "model": "gpt-4.1", "prompt": "review"}


def create(api: httpx.Client, rule_id: str, trigger: dict[str, Any], **execution: Any) -> Any:
    document = {
        "id": rule_id,
        "enabled": False,
        "triggers": [trigger],
        "execution": execution or BUILTIN,
    }
    created = api.post("/api/v1/rules", json={"document": document})
    assert created.status_code == 201, created.text
    return created.json()


def refused(api: httpx.Client, rule_id: str) -> str:
    answer = api.post(f"/api/v1/rules/{rule_id}/enable")
    assert answer.status_code == 409, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    detail: str = answer.json()["detail"]
    assert not api.get(f"/api/v1/rules/{rule_id}").json()["enabled"]
    return detail


def rule_ready(api: httpx.Client, rule_id: str) -> str | None:
    for line in api.get("/metrics").text.splitlines():
        if line.startswith(f'ade_rule_ready{{rule="{rule_id}"}}'):
            return line.rsplit(" ", 1)[1]
    return None


def test_a_github_rule_without_secret_or_poller_is_refused_until_forced(
    cluster: Cluster,
) -> None:
    # given an API with no ADE_GITHUB__WEBHOOK_SECRET and no poller running
    api = cluster.api()
    rule = create(api, "pr-review", {"type": "github.pr_opened", "repo": "acme/api"})

    # then its health says why it cannot fire, enabling it is refused with that reason
    assert rule["health"]["ready"] is False
    assert rule["health"]["triggers"][0]["error"] == GITHUB_REFUSED
    detail = refused(api, "pr-review")
    assert GITHUB_REFUSED in detail and "?force=true" in detail
    assert rule_ready(api, "pr-review") == "0.0"

    # when forced, it is enabled and still says it is not ready
    forced = api.post("/api/v1/rules/pr-review/enable", params={"force": "true"})
    assert forced.status_code == 200, forced.text
    assert forced.json()["enabled"] and not forced.json()["health"]["ready"]


def test_a_running_poller_makes_a_github_rule_ready(cluster: Cluster) -> None:
    # given a github rule, no secret, and a real `ade-tasks poll github` for its repository
    api = cluster.api()
    create(api, "pr-review", {"type": "github.pr_opened", "repo": "acme/api"})
    argv = [str(BIN / "ade-tasks"), "poll", "github", "--repos", "acme/api", "--interval", "10"]
    env = {**cluster.env, "ADE_DATA_DIR": str(cluster.tmp / "data")}
    cluster.children.append(Child(argv, env, cluster.tmp / "poller.log", cluster.tmp))

    # then once its heartbeat is in, the rule fires through it and enabling is allowed
    def health() -> Any:
        found = api.get("/api/v1/rules/pr-review").json()["health"]
        return found if found["ready"] else None

    found = wait_until(health, 30, "the poller's heartbeat")
    assert found["triggers"][0]["path"].startswith("poller poller:")
    assert found["triggers"][0]["path"].endswith("(acme/api)")
    assert api.post("/api/v1/rules/pr-review/enable").status_code == 200
    assert rule_ready(api, "pr-review") == "1.0"


def test_the_webhook_secret_makes_a_github_rule_ready(cluster: Cluster) -> None:
    api = cluster.api({"ADE_GITHUB__WEBHOOK_SECRET": "s3cret-for-tests"})

    rule = create(api, "pr-review", {"type": "github.pr_opened"})

    assert rule["health"]["ready"]
    assert rule["health"]["triggers"][0]["path"].startswith("GitHub webhook")


def test_a_custom_webhook_rule_needs_its_hook_configured(cluster: Cluster) -> None:
    # given a rule for hook `deploys` on an API where it is not configured
    api = cluster.api()
    create(api, "on-deploy", {"type": "webhook", "hook": "deploys"})

    assert "custom webhook 'deploys' is not configured" in refused(api, "on-deploy")

    # then an API where the hook is configured lets it be enabled
    key = base64.b64encode(b"a-key-for-the-tests").decode()
    hook = json.dumps({"scheme": "standard-webhooks", "secrets": [f"whsec_{key}"]})
    configured = cluster.api({"ADE_HOOKS__DEPLOYS": hook})
    assert configured.post("/api/v1/rules/on-deploy/enable").status_code == 200


def test_an_agent_rule_needs_its_provider_set_up(cluster: Cluster) -> None:
    # given an agent rule naming openai on an API without ADE_PROVIDERS__OPENAI__API_KEY
    api = cluster.api()
    rule = create(api, "agent", {"type": "manual"}, **AGENT)

    assert rule["health"]["problems"] == [
        "agent provider 'openai' is not set up: export ADE_PROVIDERS__OPENAI__API_KEY=..."
    ]
    assert "agent provider 'openai' is not set up" in refused(api, "agent")

    # then with the key in the settings it is ready (no call to the provider is made)
    keyed = cluster.api({"ADE_PROVIDERS__OPENAI__API_KEY": "sk-test"})
    assert keyed.get("/api/v1/rules/agent").json()["health"]["ready"]


def test_an_untrusted_shared_rule_is_not_ready_and_rules_list_says_why(cluster: Cluster) -> None:
    # given a rule from a shared rules file nobody trusted yet
    shared = write_rule(cluster.tmp / "rules" / "shared", "team.yaml", """
        id: team
        enabled: false
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    file_hash = hashlib.sha256(Path(shared).read_bytes()).hexdigest()
    api = cluster.api()

    assert f"`ade-tasks rules trust {file_hash}`" in refused(api, "team")
    listed = cli(cluster, "rules", "list", "--url", str(api.base_url))
    assert listed.returncode == 0, listed.stderr
    assert "not ready: untrusted shared config" in listed.stdout


def test_a_schedule_is_ready_only_while_a_beat_runs_and_the_cli_shows_it(
    cluster: Cluster,
) -> None:
    # given a schedule rule and no beat
    api = cluster.api()
    url = str(api.base_url)
    create(api, "nightly", {"type": "schedule", "cron": "0 3 * * *"})
    assert NO_BEAT in refused(api, "nightly")
    shown = cli(cluster, "rules", "show", "nightly", "--url", url)
    assert f"trigger #0 schedule: not ready: {NO_BEAT}" in shown.stdout
    refused_cli = cli(cluster, "rules", "enable", "nightly", "--url", url)
    assert refused_cli.returncode == 1 and "answered 409" in refused_cli.stderr

    # when a real beat runs, its heartbeat makes the schedule ready
    cluster.beat()
    wait_until(
        lambda: api.get("/api/v1/rules/nightly").json()["health"]["ready"], 30, "a beat heartbeat"
    )
    shown = cli(cluster, "rules", "show", "nightly", "--url", url)
    assert "ready: every trigger can fire" in shown.stdout
    assert "trigger #0 schedule: beat " in shown.stdout
    enabled = cli(cluster, "rules", "enable", "nightly", "--url", url)
    assert enabled.returncode == 0, enabled.stderr


def test_rules_enable_force_enables_a_rule_that_cannot_fire(cluster: Cluster) -> None:
    api = cluster.api()
    create(api, "on-deploy", {"type": "webhook", "hook": "deploys"})

    forced = cli(cluster, "rules", "enable", "on-deploy", "--force", "--url", str(api.base_url))

    assert forced.returncode == 0, forced.stderr
    assert api.get("/api/v1/rules/on-deploy").json()["enabled"]


def test_a_github_rule_is_not_ready_while_its_pollers_every_poll_fails(cluster: Cluster) -> None:
    # given an enabled github rule, no secret, and a real `ade-tasks poll github` without a
    # token against a GitHub (on 127.0.0.1) that wants one (issue 37, finding 3)
    api = cluster.api()
    create(api, "pr-review", {"type": "github.pr_opened", "repo": "acme/widgets"})
    assert api.post("/api/v1/rules/pr-review/enable", params={"force": "true"}).is_success
    with ScriptedServer(repos=["acme/widgets"], token="ghp_the_right_token") as github:
        argv = [str(BIN / "ade-tasks"), "poll", "github", "--interval", "10"]
        env = {**cluster.env, "ADE_DATA_DIR": str(cluster.tmp / "data")}
        env["ADE_GITHUB__API_URL"] = github.url
        cluster.children.append(Child(argv, env, cluster.tmp / "poller.log", cluster.tmp))

        # then once its failed poll is in its heartbeat, the rule is not ready, saying why
        def failing() -> str | None:
            trigger = api.get("/api/v1/rules/pr-review").json()["health"]["triggers"][0]
            error: str | None = trigger["error"]
            return error if error and "fail" in error else None

        error = wait_until(failing, 30, "the poller's failed poll in its heartbeat")
        assert "and the polls of acme/widgets fail: poller poller:" in error
        assert "answered 401 (Bad credentials)" in error and "ADE_GITHUB__TOKEN" in error
        assert error.endswith("its last successful poll: never")
        assert rule_ready(api, "pr-review") == "0.0"
        shown = cli(cluster, "rules", "show", "pr-review", "--url", str(api.base_url))
        assert "answered 401 (Bad credentials)" in shown.stdout


def test_a_paused_rule_says_so_in_the_api_every_cli_view_and_the_metrics(
    cluster: Cluster,
) -> None:
    # given a schedule rule with a live beat, ready, then paused by an operator with a note
    with cluster.session_factory.begin() as session:
        heartbeats_db.record(session, "beat-t", heartbeats_db.BEAT, every=3600, now=utcnow())
    api = cluster.api()
    url = str(api.base_url)
    create(api, "nightly", {"type": "schedule", "cron": "0 3 * * *"})
    assert api.post("/api/v1/rules/nightly/enable").status_code == 200
    assert rule_ready(api, "nightly") == "1.0"
    paused = api.post("/api/v1/rules/nightly/pause", json={"note": "deploy freeze", "by": "ana"})
    assert paused.status_code == 200, paused.text

    # then GET /api/v1/rules/{id} carries the pause (who, since, note) and its health holds
    rule = api.get("/api/v1/rules/nightly").json()
    (pause,) = rule["pauses"]
    assert (pause["trigger_index"], pause["note"]) == (None, "deploy freeze")
    assert pause["paused_by"].endswith("(ana)") and pause["paused_at"]
    assert rule["health"]["ready"] is False
    trigger = rule["health"]["triggers"][0]
    assert trigger["paused"] and "is paused by" in trigger["error"]
    assert "deploy freeze" in trigger["error"]

    # and `rules list`, `rules show` and `rules next` say it is paused, with the note
    listed = cli(cluster, "rules", "list", "--url", url).stdout
    (line,) = [line for line in listed.splitlines() if line.startswith("nightly")]
    assert " paused " in line and " enabled " not in line
    assert "paused: rule 'nightly' is paused by" in listed and "deploy freeze" in listed
    shown = cli(cluster, "rules", "show", "nightly", "--url", url).stdout
    assert "(paused, from api)" in shown and "deploy freeze" in shown
    assert "ready: every trigger can fire" not in shown
    assert "once resumed: beat beat-t" in shown
    upcoming = cli(cluster, "rules", "next", "nightly", "-n", "2", "--url", url).stdout
    assert "paused: these times are skipped until it is resumed: rule 'nightly'" in upcoming

    # and the metrics: not ready, and when it was paused, by whom, why
    assert rule_ready(api, "nightly") == "0.0"
    metrics = api.get("/metrics").text
    (sample,) = [m for m in metrics.splitlines() if m.startswith("ade_rule_paused_since_seconds{")]
    assert 'rule="nightly"' in sample and 'trigger="all"' in sample
    assert 'note="deploy freeze"' in sample and "(ana)" in sample

    # and a pause is no reason to refuse enabling it again
    assert api.post("/api/v1/rules/nightly/disable").status_code == 200
    assert api.post("/api/v1/rules/nightly/enable").status_code == 200

    # once resumed, every view is back to ready
    assert api.post("/api/v1/rules/nightly/resume", json={}).status_code == 200
    assert api.get("/api/v1/rules/nightly").json()["pauses"] == []
    assert rule_ready(api, "nightly") == "1.0"
