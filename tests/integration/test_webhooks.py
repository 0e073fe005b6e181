"""Webhook ingress end to end: a real `ade-tasks api` process and a real worker on PostgreSQL and
Redis, driven over HTTP with GitHub's own example deliveries and custom-hook deliveries."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from ade_tasks.db.schema import IngressEventRow, RunRow
from tests.conftest import write_rule
from tests.fixtures import GITHUB_FIXTURES
from tests.integration.conftest import Cluster
from tests.support import wait_until

SECRET = "It's a Secret to Everybody"
HELLO = "Codertocat/Hello-World"
HOOK_KEY = base64.b64encode(b"standard-webhooks-test-key").decode()
EXPECTED = {  # fixture -> the trigger type it normalizes to
    "pull_request/opened.payload.json": "github.pr_opened",
    "pull_request/reopened.payload.json": "github.pr_opened",
    "pull_request/synchronize.payload.json": "github.pr_updated",
    "pull_request/labeled.payload.json": "github.pr_updated",
    "pull_request/closed.payload.json": "github.pr_closed",
    "issue_comment/created.payload.json": "github.issue_commented",
    "issues/opened.payload.json": "github.issue_opened",
    "issues/labeled.payload.json": "github.issue_labeled",
    "push/payload.json": "git.push",
    "push/with-new-branch.payload.json": "git.push",
    "check_run/completed.payload.json": "github.check_run_completed",
    "workflow_run/completed.payload.json": "github.workflow_run_completed",
    "release/published.payload.json": "github.release_published",
}


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver(
    api: httpx.Client, event: str, body: bytes, *, delivery: str | None = None, **headers: str
) -> httpx.Response:
    sent = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body),
        "Content-Type": "application/json",
        **headers,
    }
    return api.post("/api/v1/webhooks/github", content=body, headers=sent)


def rules_for(cluster: Cluster, rules: dict[str, str]) -> None:
    directory = cluster.tmp / "rules"
    for rule_id, trigger in rules.items():
        write_rule(
            directory,
            f"{rule_id}.yaml",
            f"id: {rule_id}\ntriggers: [{trigger}]\n"
            "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n",
        )
    cluster.sync_rules(directory)


@pytest.fixture
def api(cluster: Cluster) -> Iterator[httpx.Client]:
    hook = {
        "scheme": "standard-webhooks",
        "secrets": [f"whsec_{HOOK_KEY}"],
        "filters": [{"path": "type", "op": "exists"}],
    }
    env = {
        "ADE_GITHUB__WEBHOOK_SECRET": SECRET,
        "ADE_GITHUB__MAX_BODY_BYTES": str(64 * 1024),
        "ADE_INGRESS_READ_TIMEOUT": "1.5",
        "ADE_HOOKS__DEPLOYS": json.dumps(hook),
    }
    client = cluster.api(env=env)
    yield client
    client.close()


def events(cluster: Cluster) -> list[IngressEventRow]:
    with cluster.session_factory() as session:
        return list(session.scalars(select(IngressEventRow).order_by(IngressEventRow.id)))


def runs_of(cluster: Cluster) -> list[tuple[str, str]]:
    with cluster.session_factory() as session:
        return [
            (rule_id, trigger.get("delivery_id") or trigger.get("hook", ""))
            for rule_id, trigger in session.execute(select(RunRow.rule_id, RunRow.trigger))
        ]


def test_every_github_example_is_accepted_normalized_and_matched_to_fitting_rules_only(
    cluster: Cluster, api: httpx.Client
) -> None:
    types = sorted(set(EXPECTED.values()))
    rules = {f"on-{t.replace('.', '-')}": f"{{type: {t}, repo: {HELLO}}}" for t in types}
    rules["on-github-workflow_run_completed"] = "{type: github.workflow_run_completed}"
    rules["other-repo"] = "{type: github.pr_opened, repo: someone/else}"
    rules["owners-only"] = "{type: github.pr_opened, author_associations: [MEMBER]}"
    rules_for(cluster, rules)
    cluster.worker()

    deliveries = {}
    for name, trigger_type in EXPECTED.items():
        body = (GITHUB_FIXTURES / name).read_bytes()
        response = deliver(api, name.split("/")[0], body)
        assert response.status_code == 202, response.text
        assert response.json()["trigger_type"] == trigger_type
        deliveries[response.json()["event_id"]] = trigger_type
    ping = deliver(api, "ping", (GITHUB_FIXTURES / "ping/payload.json").read_bytes())

    wait_until(
        lambda: (
            all(e.status == "dispatched" for e in events(cluster))
            and len(events(cluster)) == len(EXPECTED)
        ),
        30,
        "every event to be dispatched",
    )
    assert ping.status_code == 200 and ping.json()["pong"] is True
    for event in events(cluster):
        (run_id,) = event.runs or [None]
        with cluster.session_factory() as session:
            run = session.get(RunRow, run_id)
        assert run is not None, f"{event.event_key} started no run"
        expected_rule = f"on-{deliveries[event.id].replace('.', '-')}"
        assert run.rule_id == expected_rule, event.summary
        assert run.trigger["delivery_id"] == event.delivery_id
    # Each candidate rule says why it ran or not (issue 36, finding 5); a rule narrowed to
    # another repository is none (issue 39: the index reads only the rules that can match)
    opened = next(id_ for id_, kind in deliveries.items() if kind == "github.pr_opened")
    shown = api.get(f"/api/v1/ingress/events/{opened}").json()["matching"]
    verdicts = {e["rule"]: (e["verdict"], e.get("filter"), e.get("reason")) for e in shown["rules"]}
    assert verdicts["on-github-pr_opened"][0] == "matched"
    assert "other-repo" not in verdicts
    assert verdicts["owners-only"] == (
        "refused",
        "author_associations",
        "author association OWNER is not one of MEMBER",
    )
    assert api.get("/api/v1/ingress/events/999999").status_code == 404


@pytest.mark.parametrize(
    "case",
    ["wrong-secret", "missing", "sha1-only", "truncated", "body-changed", "re-serialized"],
)
def test_forged_github_deliveries_are_refused_and_nothing_is_stored(
    cluster: Cluster, api: httpx.Client, case: str
) -> None:
    body = (GITHUB_FIXTURES / "pull_request/opened.payload.json").read_bytes()
    signature = sign(body)
    headers: dict[str, Any] = {}
    sent = body
    if case == "wrong-secret":
        headers["X-Hub-Signature-256"] = sign(body, "not the secret")
    elif case == "missing":
        headers["X-Hub-Signature-256"] = ""
    elif case == "sha1-only":
        headers["X-Hub-Signature-256"] = ""
        headers["X-Hub-Signature"] = "sha1=" + hmac.new(SECRET.encode(), body, "sha1").hexdigest()
    elif case == "truncated":
        headers["X-Hub-Signature-256"] = signature[:-8]
    elif case == "body-changed":  # signed, then one byte changed
        sent = body.replace(b'"opened"', b'"openeD"', 1)
        headers["X-Hub-Signature-256"] = signature
    elif case == "re-serialized":  # signed, then parsed and dumped again by a proxy
        sent = json.dumps(json.loads(body)).encode()
        headers["X-Hub-Signature-256"] = signature
    else:
        raise AssertionError(case)

    response = deliver(api, "pull_request", sent, **headers)

    assert response.status_code == 401, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert events(cluster) == []


def test_a_redelivery_and_a_replayed_body_start_one_run(
    cluster: Cluster, api: httpx.Client
) -> None:
    rules_for(cluster, {"reviewer": f"{{type: github.pr_opened, repo: {HELLO}}}"})
    cluster.worker()
    body = (GITHUB_FIXTURES / "pull_request/opened.payload.json").read_bytes()

    first = deliver(api, "pull_request", body, delivery="delivery-1")
    again = deliver(api, "pull_request", body, delivery="delivery-1")  # GitHub's "Redeliver"
    replay = deliver(api, "pull_request", body, delivery="captured-and-replayed")

    assert first.status_code == 202
    assert (again.status_code, again.json()) == (200, {"duplicate": True, "stored": False})
    assert (replay.status_code, replay.json()["duplicate"]) == (200, True)
    wait_until(lambda: runs_of(cluster), 30, "the run")
    assert runs_of(cluster) == [("reviewer", "delivery-1")]
    assert len(events(cluster)) == 1


def test_oversized_bodies_are_refused_before_they_are_buffered(
    cluster: Cluster, api: httpx.Client
) -> None:
    big = b'{"x": "' + b"a" * (80 * 1024) + b'"}'

    declared = deliver(api, "push", big)

    def chunks() -> Iterator[bytes]:  # chunked transfer: no Content-Length to go by
        for start in range(0, len(big), 4096):
            yield big[start : start + 4096]

    chunked = api.post(
        "/api/v1/webhooks/github",
        content=chunks(),
        headers={"X-GitHub-Event": "push", "X-GitHub-Delivery": "c", "X-Hub-Signature-256": "x"},
    )
    assert declared.status_code == 413 and chunked.status_code == 413
    assert "nothing was stored" in chunked.json()["detail"]
    assert events(cluster) == []


def test_a_slow_drip_upload_is_cut_off(cluster: Cluster, api: httpx.Client) -> None:
    def drip() -> Iterator[bytes]:
        for _ in range(20):  # 20 x 0.2 s: longer than the 1.5 s read timeout
            yield b" "
            time.sleep(0.2)

    started = time.monotonic()
    response = api.post(
        "/api/v1/webhooks/github",
        content=drip(),
        headers={"X-GitHub-Event": "push", "X-GitHub-Delivery": "d", "X-Hub-Signature-256": "x"},
    )

    assert response.status_code == 408
    assert time.monotonic() - started < 4.5
    assert events(cluster) == []


def test_malformed_json_with_a_valid_signature_is_a_failed_delivery(
    cluster: Cluster, api: httpx.Client
) -> None:
    response = deliver(api, "pull_request", b'{"action": "opened", ', delivery="broken-1")

    listed = api.get("/api/v1/ingress/events").json()["items"]
    assert response.status_code == 400
    assert [(e["delivery_id"], e["status"]) for e in listed] == [("broken-1", "failed")]
    assert "not valid JSON" in listed[0]["error"]
    assert runs_of(cluster) == []


def test_a_delivery_the_database_cannot_store_is_refused_alone(
    cluster: Cluster, api: httpx.Client
) -> None:
    payload = json.loads((GITHUB_FIXTURES / "pull_request/opened.payload.json").read_bytes())
    payload["pull_request"]["title"] = "fix \u0000 in names"  # JSON allows it, JSONB does not
    refused = deliver(api, "pull_request", json.dumps(payload).encode(), delivery="nul-1")
    fine = deliver(
        api, "pull_request", (GITHUB_FIXTURES / "pull_request/opened.payload.json").read_bytes()
    )

    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert "cannot store" in refused.json()["detail"]
    assert fine.status_code == 202, fine.text
    assert [e.id for e in events(cluster)] == [fine.json()["event_id"]]


def standard_headers(body: bytes, *, skew: float = 0.0, msg: str | None = None) -> dict[str, str]:
    message_id = msg or f"msg_{uuid.uuid4().hex}"
    stamp = str(int(time.time() + skew))
    signed = f"{message_id}.{stamp}.".encode() + body
    digest = hmac.new(base64.b64decode(HOOK_KEY), signed, hashlib.sha256).digest()
    return {
        "webhook-id": message_id,
        "webhook-timestamp": stamp,
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
        "Authorization": "Bearer not-for-the-log",
    }


def test_custom_hook_runs_its_rules_and_refuses_stale_timestamps(
    cluster: Cluster, api: httpx.Client
) -> None:
    rules_for(
        cluster,
        {
            "deploy-done": '{type: webhook, hook: deploys, filters: {type: "deploy.done"}}',
            "deploy-failed": '{type: webhook, hook: deploys, filters: {type: "deploy.failed"}}',
        },
    )
    cluster.worker()
    body = json.dumps({"type": "deploy.done", "env": "prod"}).encode()
    url = "/api/v1/webhooks/deploys"

    late = api.post(url, content=body, headers=standard_headers(body, skew=-360))
    early = api.post(url, content=body, headers=standard_headers(body, skew=360))
    accepted = api.post(url, content=body, headers=standard_headers(body, msg="msg_1"))
    duplicate = api.post(url, content=body, headers=standard_headers(body, msg="msg_1"))

    assert (late.status_code, early.status_code) == (401, 401)
    assert "in the past" in late.json()["detail"] and "in the future" in early.json()["detail"]
    assert (accepted.status_code, duplicate.status_code) == (202, 200)
    wait_until(lambda: runs_of(cluster), 30, "the hook's run")
    assert runs_of(cluster) == [("deploy-done", "msg_1")]
    log = api.get(f"{url}/deliveries").json()
    assert [entry["status_code"] for entry in log] == [200, 202, 401, 401]
    assert log[0]["headers"]["authorization"] == "[redacted]"
    assert log[0]["headers"]["webhook-signature"] == "[redacted]"
    assert json.loads(log[1]["body"]) == {"type": "deploy.done", "env": "prod"}


def test_the_61st_delivery_in_a_minute_is_told_to_slow_down(
    cluster: Cluster, api: httpx.Client
) -> None:
    body = json.dumps({"type": "ping"}).encode()
    # Start right after a minute boundary so all 61 fall into one rate window.
    wait_until(lambda: time.time() % 60 < 40, 25, "a fresh minute")

    codes = [
        api.post("/api/v1/webhooks/deploys", content=body, headers=standard_headers(body))
        for _ in range(61)
    ]

    assert [c.status_code for c in codes[:60]] == [202] * 60
    assert codes[60].status_code == 429 and codes[60].headers["retry-after"] == "60"
    with cluster.session_factory() as session:
        stored = session.scalar(select(func.count()).select_from(IngressEventRow))
    assert stored == 60


def test_unknown_hooks_are_not_found(api: httpx.Client, cluster: Cluster, tmp_path: Path) -> None:
    response = api.post("/api/v1/webhooks/nope", content=b"{}")

    assert response.status_code == 404
    assert "ADE_HOOKS__" in response.json()["detail"]


def test_a_label_starts_one_run_any_event_starts_github_event_and_own_pushes_start_nothing(
    cluster: Cluster, api: httpx.Client
) -> None:
    """Issue 36, findings 1 and 3 over the signed endpoint and a real worker: `github.pr_labeled`
    runs once for the label and not for the pushes that follow (the engine's own push included),
    `github.event` starts on a check suite that matched nothing before, and a redelivery
    starts nothing twice."""
    rules_for(
        cluster,
        {
            "fix": f"{{type: github.pr_labeled, repo: {HELLO}, label: agent-fix}}",
            "suite": "{type: github.event, event: check_suite, actions: [completed]}",
            "pushes": "{type: github.pr_updated, actions: [synchronize]}",
        },
    )
    cluster.worker(env={"ADE_GITHUB__BOT_LOGINS": '["ade-bot[bot]"]'})
    labeled = json.loads((GITHUB_FIXTURES / "pull_request/labeled.payload.json").read_bytes())
    labeled["label"]["name"] = "agent-fix"
    pushed = json.loads((GITHUB_FIXTURES / "pull_request/synchronize.payload.json").read_bytes())
    pushed["sender"]["login"] = "ade-bot[bot]"
    suite = (GITHUB_FIXTURES / "check_suite/completed.payload.json").read_bytes()

    answers = [
        deliver(api, "pull_request", json.dumps(labeled).encode(), delivery="label"),
        deliver(api, "pull_request", json.dumps(pushed).encode(), delivery="own-push"),
        deliver(api, "check_suite", suite, delivery="suite"),
        deliver(api, "check_suite", suite, delivery="suite"),  # GitHub's "Redeliver"
    ]

    assert [a.status_code for a in answers] == [202, 202, 202, 200]
    wait_until(
        lambda: (
            len(events(cluster)) == 3 and all(e.status == "dispatched" for e in events(cluster))
        ),
        30,
        "the three events to be dispatched",
    )
    assert sorted(runs_of(cluster)) == [("fix", "label"), ("suite", "suite")]
    own = next(e for e in events(cluster) if e.delivery_id == "own-push")
    assert own.runs == [] and own.trigger_type == "github.pr_updated"


RECIPE = Path(__file__).resolve().parents[2] / "docs" / "recipes" / "local-github-delivery.md"


def test_the_recipe_signs_a_delivery_the_api_accepts(
    cluster: Cluster, api: httpx.Client, tmp_path: Path
) -> None:
    """docs/recipes/local-github-delivery.md, steps 2 to 4 as written: its rule, its payload, and
    its openssl + curl commands run by bash against the running API."""
    # Given the recipe's rule and payload
    text = RECIPE.read_text()
    (rule,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (payload,) = re.findall(r"```json\n(.*?)```", text, re.S)
    write_rule(cluster.tmp / "rules", "pr-opened.yaml", rule)
    cluster.sync_rules(cluster.tmp / "rules")
    (tmp_path / "payload.json").write_text(payload)
    send = next(b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "openssl" in b)

    # When its commands run in a shell with the secret the API checks
    env = {"PATH": "/usr/bin:/bin", "ADE_API_URL": str(api.base_url).rstrip("/"),
           "ADE_GITHUB__WEBHOOK_SECRET": SECRET}  # fmt: skip
    sent = subprocess.run(["bash", "-euo", "pipefail", "-c", send], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=30)  # fmt: skip

    # Then the API accepted and stored it (matching it to rules is the worker's, tested above)
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout), sent.stdout
    stored = events(cluster)
    assert [(e.source, e.delivery_id is not None) for e in stored] == [("github", True)]

    # And a body changed after signing is refused
    (tmp_path / "forged.json").write_text(payload.replace("Try ADE", "Try ADF"))
    forged = subprocess.run(
        ["bash", "-c", send.replace("@payload.json", "@forged.json")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert forged.returncode != 0 and "401" in forged.stderr, forged.stderr
    assert len(events(cluster)) == 1
