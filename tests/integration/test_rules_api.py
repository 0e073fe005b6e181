"""Managing rules and reading usage through the real `ade-tasks api` process (PostgreSQL,
Redis): create, update with version history, enable, disable and delete; validation errors as
problem+json naming the field; rules from files refused; roles; the CLI round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db import usage as usage_db
from ade_tasks.db.schema import RuleRow, RuleVersionRow
from tests.integration.conftest import Cluster, api_with_hello_rule
from tests.integration.test_cli_cluster import cli

PROBLEM = "application/problem+json"
DOCUMENT: dict[str, Any] = {
    "id": "api-rule",
    "description": "made through the API",
    "triggers": [{"type": "manual"}, {"type": "schedule", "cron": "0 3 * * *"}],
    "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": "echo 1"}]},
    "inputs": {"target": {"type": "choice", "options": ["staging", "prod"], "default": "staging"}},
}
UPDATED_YAML = """
id: api-rule
triggers: [{type: manual}, {type: schedule, cron: "30 4 * * *"}]
execution: {kind: built-in, actions: [{type: run-command, command: "echo 2"}]}
"""


@pytest.fixture
def api(cluster: Cluster) -> httpx.Client:
    return api_with_hello_rule(cluster)


def caller(cluster: Cluster, api: httpx.Client, role: Role) -> httpx.Client:
    with cluster.session_factory.begin() as session:
        secret = tokens_db.create_token(session, f"a-{role.value}", role, "tests")[1]
    return httpx.Client(
        base_url=api.base_url, headers={"Authorization": f"Bearer {secret}"}, timeout=10
    )


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


def versions(cluster: Cluster, rule_id: str) -> int:
    with cluster.session_factory() as session:
        stmt = select(func.count()).where(RuleVersionRow.rule_id == rule_id)
        return int(session.scalar(stmt) or 0)


def test_a_rule_is_created_updated_switched_and_deleted_with_its_history(
    cluster: Cluster, api: httpx.Client
) -> None:
    created = api.post("/api/v1/rules", json={"document": DOCUMENT, "by": "alice"})
    assert created.status_code == 201, created.text
    assert created.headers["location"].endswith("/api/v1/rules/api-rule")
    rule = created.json()
    assert (rule["version"], rule["source"], rule["source_file"]) == (1, "api", None)
    assert rule["enabled"] and rule["trust_state"] == "trusted"
    assert api.get("/api/v1/rules/api-rule").json() == rule

    updated = api.put("/api/v1/rules/api-rule", json={"yaml": UPDATED_YAML})
    assert updated.status_code == 200, updated.text
    assert updated.json()["version"] == 2
    assert updated.json()["document"]["execution"]["actions"][0]["command"] == "echo 2"
    again = api.put("/api/v1/rules/api-rule", json={"yaml": UPDATED_YAML})  # no change
    assert again.json()["version"] == 2
    history = api.get("/api/v1/rules/api-rule/versions").json()
    assert [(v["version"], v["change"], v["changed_by"]) for v in history["items"]] == [
        (2, "updated", "tests"),
        (1, "created", "tests (alice)"),
    ]
    assert history["items"][1]["document"]["inputs"]["target"]["options"] == ["staging", "prod"]
    assert history["next_cursor"] is None
    schedule = api.get("/api/v1/rules/api-rule/schedule").json()
    assert schedule["triggers"][0]["cron"] == "30 4 * * *"

    disabled = api.post("/api/v1/rules/api-rule/disable")
    assert disabled.status_code == 200 and disabled.json()["enabled"] is False
    assert disabled.json()["version"] == 2  # a switch, not a version
    assert api.get("/api/v1/rules/api-rule/schedule").json()["enabled"] is False
    # An edit that does not mention `enabled` leaves the rule disabled.
    edited = api.put(
        "/api/v1/rules/api-rule", json={"yaml": UPDATED_YAML.replace("echo 2", "echo 3")}
    )
    assert (edited.json()["version"], edited.json()["enabled"]) == (3, False)

    # A manual run of a disabled rule is allowed (README: only automatic triggers need it
    # enabled); while it is unfinished the rule may not be deleted.
    run = api.post("/api/v1/rules/api-rule/runs", json={"inputs": {}})
    assert run.status_code == 202, run.text
    run_id = run.json()["run_id"]
    refused = problem(api.delete("/api/v1/rules/api-rule"), 409)
    assert run_id in refused["detail"] and "cancel them" in refused["detail"]
    assert api.get("/api/v1/rules/api-rule").status_code == 200

    # No beat runs here, so its schedule cannot fire: enabling needs force (rule health).
    assert api.post("/api/v1/rules/api-rule/enable").status_code == 409
    enabled = api.post("/api/v1/rules/api-rule/enable", params={"force": "true"})
    assert enabled.json()["enabled"] is True
    assert api.post(f"/api/v1/runs/{run_id}/cancel", json={}).status_code == 200
    deleted = api.delete("/api/v1/rules/api-rule", params={"by": "bob"})
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["version"] == 4

    assert "does not exist" in problem(api.get("/api/v1/rules/api-rule"), 404)["detail"]
    assert api.get(f"/api/v1/runs/{run_id}").json()["rule_id"] == "api-rule"  # history stays
    after = api.get("/api/v1/rules/api-rule/versions").json()["items"]
    assert [(v["version"], v["change"]) for v in after][:2] == [(4, "deleted"), (3, "updated")]
    assert after[0]["changed_by"] == "tests (bob)"
    paths = {(item["method"], item["path"]) for item in api.get("/api/v1/audit").json()}
    assert ("DELETE", "/api/v1/rules/api-rule") in paths


INVALID: list[tuple[dict[str, Any], str, str]] = [
    (
        {"document": {**DOCUMENT, "triggers": [{"type": "schedule", "cron": "61 * * * *"}]}},
        "triggers.0.cron",
        "",
    ),
    ({"document": {**DOCUMENT, "colour": "red"}}, "colour", "unknown field"),
    ({"document": {k: v for k, v in DOCUMENT.items() if k != "execution"}}, "execution", ""),
    (
        {"document": {**DOCUMENT, "inputs": {"env": {"type": "choice"}}}},
        "inputs.env",
        "non-empty `options`",
    ),
    ({"document": {**DOCUMENT, "id": "Not A Slug"}}, "id", ""),
    ({"yaml": "id: x\ntriggers: [\n"}, "line 3", "malformed YAML"),
    ({"yaml": "- id: a\n- id: b\n"}, "(document)", "expected a mapping"),
]


def test_each_invalid_rule_is_refused_with_422_naming_the_field(
    cluster: Cluster, api: httpx.Client
) -> None:
    # One API process for every case: starting one per case would cost seconds each.
    for body, field, reason in INVALID:
        body422 = problem(api.post("/api/v1/rules", json=body), 422)

        assert any(
            item["field"].startswith(field) and reason in item["reason"]
            for item in body422["errors"]
        ), (body, body422)
        assert field in body422["detail"], body
    with cluster.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(RuleRow)) == 1  # only `hello`


def test_bad_requests_are_refused_and_change_nothing(cluster: Cluster, api: httpx.Client) -> None:
    both = problem(api.post("/api/v1/rules", json={"document": DOCUMENT, "yaml": "id: x"}), 422)
    assert "exactly one of" in both["detail"]
    assert "exactly one of" in problem(api.post("/api/v1/rules", json={}), 422)["detail"]
    extra = problem(api.post("/api/v1/rules", json={"document": DOCUMENT, "x": 1}), 422)
    assert "body.x" in extra["detail"]

    assert api.post("/api/v1/rules", json={"document": DOCUMENT}).status_code == 201
    taken = problem(api.post("/api/v1/rules", json={"document": DOCUMENT}), 409)
    assert "already exists" in taken["detail"]
    other = {**DOCUMENT, "id": "someone-else"}
    renamed = problem(api.put("/api/v1/rules/api-rule", json={"document": other}), 422)
    assert renamed["errors"][0]["field"] == "id"
    for method, path in (
        ("PUT", "/api/v1/rules/nope"),
        ("DELETE", "/api/v1/rules/nope"),
        ("POST", "/api/v1/rules/nope/enable"),
        ("POST", "/api/v1/rules/nope/disable"),
        ("GET", "/api/v1/rules/nope/versions"),
    ):
        response = api.request(method, path, json={"document": {**DOCUMENT, "id": "nope"}})
        assert "rule 'nope' does not exist" in problem(response, 404)["detail"], path
    bad_cursor = api.get("/api/v1/rules/api-rule/versions", params={"cursor": "x"})
    assert "cursor" in problem(bad_cursor, 422)["detail"]
    assert versions(cluster, "api-rule") == 1


def test_a_rule_from_a_file_is_not_edited_or_deleted_through_the_api(
    cluster: Cluster, api: httpx.Client
) -> None:
    document = {**DOCUMENT, "id": "hello"}
    edited = problem(api.put("/api/v1/rules/hello", json={"document": document}), 409)
    assert "hello.yaml" in edited["detail"] and "`ade-tasks rules sync`" in edited["detail"]
    assert "rules sync" in problem(api.delete("/api/v1/rules/hello"), 409)["detail"]

    rule = api.get("/api/v1/rules/hello").json()
    assert (rule["version"], rule["source"]) == (1, "file")
    assert rule["document"]["execution"]["actions"][0]["command"] == "echo hi"
    # The switch works for every rule (an emergency stop needs no file edit).
    assert api.post("/api/v1/rules/hello/disable").json()["enabled"] is False
    history = api.get("/api/v1/rules/hello/versions").json()["items"]
    assert [(v["version"], v["change"], v["source"], v["changed_by"]) for v in history] == [
        (1, "created", "file", "rules sync")
    ]
    assert history[0]["source_file"].endswith("hello.yaml")


def test_an_operator_may_not_write_rules_and_a_viewer_reads_their_history(
    cluster: Cluster, api: httpx.Client
) -> None:
    operator = caller(cluster, api, Role.OPERATOR)
    viewer = caller(cluster, api, Role.VIEWER)
    body = {"document": {**DOCUMENT, "id": "hello"}}
    for method, path in (
        ("POST", "/api/v1/rules"),
        ("PUT", "/api/v1/rules/hello"),
        ("DELETE", "/api/v1/rules/hello"),
        ("POST", "/api/v1/rules/hello/enable"),
        ("POST", "/api/v1/rules/hello/disable"),
    ):
        refused = problem(operator.request(method, path, json=body), 403)
        assert "needs the admin role" in refused["detail"], path

    with cluster.session_factory() as session:
        rows = session.scalars(select(RuleRow)).all()
    assert [(r.id, r.version, r.enabled) for r in rows] == [("hello", 1, True)]
    assert versions(cluster, "hello") == 1
    assert viewer.get("/api/v1/rules/hello/versions").status_code == 200
    assert viewer.get("/api/v1/usage").status_code == 200
    assert operator.post("/api/v1/rules/hello/runs", json={}).status_code == 202


def test_the_rules_list_pages_with_a_cursor_and_stays_a_list(
    cluster: Cluster, api: httpx.Client
) -> None:
    for name in ("b-rule", "c-rule", "d-rule"):
        assert api.post("/api/v1/rules", json={"document": {**DOCUMENT, "id": name}}).is_success
    everything = api.get("/api/v1/rules")
    assert [r["id"] for r in everything.json()] == ["b-rule", "c-rule", "d-rule", "hello"]
    assert "x-next-cursor" not in everything.headers

    seen, params = [], {"limit": 3}
    while True:
        page = api.get("/api/v1/rules", params=params)
        seen += [r["id"] for r in page.json()]
        if "x-next-cursor" not in page.headers:
            break
        assert 'rel="next"' in page.headers["link"]
        params = {"limit": 3, "cursor": page.headers["x-next-cursor"]}
    assert seen == ["b-rule", "c-rule", "d-rule", "hello"]
    assert "cursor" in problem(api.get("/api/v1/rules", params={"cursor": "%%"}), 422)["detail"]
    paths = api.get("/openapi.json").json()["paths"]
    assert {"get", "post"} <= set(paths["/api/v1/rules"])
    assert {"get", "put", "delete"} <= set(paths["/api/v1/rules/{rule_id}"])
    assert "/api/v1/rules/{rule_id}/versions" in paths and "/api/v1/usage" in paths


def test_usage_per_billing_code_and_day_with_totals(cluster: Cluster, api: httpx.Client) -> None:
    with cluster.session_factory.begin() as session:
        for day, code, seconds, tokens, cost in (
            ("2026-11-01", "team-a", 10.0, 100, 0.5),
            ("2026-11-02", "team-a", 20.0, 200, 1.25),
            ("2026-11-02", "team-b", 1.5, 0, 0.0),
            ("2026-11-05", "team-a", 5.0, 50, 0.25),
        ):
            usage_db.add_usage(
                session, code, day, run_seconds=seconds, tokens=tokens, cost_usd=cost
            )

    everything = api.get("/api/v1/usage").json()
    assert [(r["day"], r["billing_code"]) for r in everything["items"]] == [
        ("2026-11-05", "team-a"),
        ("2026-11-02", "team-a"),
        ("2026-11-02", "team-b"),
        ("2026-11-01", "team-a"),
    ]
    assert everything["totals"] == {"run_seconds": 36.5, "tokens": 350, "cost_usd": 2.0}
    params = {"billing_code": "team-a", "since": "2026-11-02", "until": "2026-11-05", "limit": 1}
    first = api.get("/api/v1/usage", params=params).json()
    assert [r["day"] for r in first["items"]] == ["2026-11-05"]
    assert first["totals"] == {"run_seconds": 25.0, "tokens": 250, "cost_usd": 1.5}
    rest = api.get("/api/v1/usage", params={**params, "cursor": first["next_cursor"]}).json()
    assert [r["day"] for r in rest["items"]] == ["2026-11-02"] and rest["next_cursor"] is None

    backwards = api.get("/api/v1/usage", params={"since": "2026-11-05", "until": "2026-11-01"})
    assert "swap them" in problem(backwards, 422)["detail"]
    assert (
        "since" in problem(api.get("/api/v1/usage", params={"since": "yesterday"}), 422)["detail"]
    )
    assert "cursor" in problem(api.get("/api/v1/usage", params={"cursor": "%%"}), 422)["detail"]


def test_the_cli_manages_rules_and_reads_usage_against_a_remote_api(
    cluster: Cluster, api: httpx.Client, tmp_path: Path
) -> None:
    url = str(api.base_url)
    rule_file = tmp_path / "api-rule.yaml"
    rule_file.write_text(UPDATED_YAML.replace("echo 2", "echo cli"))

    def run_json(*args: str) -> Any:
        result = cli(cluster, *args, "--url", url, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    created = run_json("rules", "create", str(rule_file), "--by", "carol")
    assert (created["id"], created["version"], created["source"]) == ("api-rule", 1, "api")
    rule_file.write_text(UPDATED_YAML.replace("echo 2", "echo cli v2"))
    assert run_json("rules", "update", str(rule_file))["version"] == 2
    assert (
        run_json("rules", "show", "api-rule")["document"]["execution"]["actions"][0]["command"]
        == "echo cli v2"
    )
    assert run_json("rules", "disable", "api-rule")["enabled"] is False
    # no beat runs here, so its schedule cannot fire: enabling it needs --force
    assert run_json("rules", "enable", "api-rule", "--force")["enabled"] is True
    history = run_json("rules", "versions", "api-rule")
    assert [v["version"] for v in history["items"]] == [2, 1]
    assert history["items"][1]["changed_by"] == "tests (carol)"
    assert run_json("rules", "delete", "api-rule")["version"] == 3
    assert run_json("usage", "--billing-code", "nobody", "--since", "2026-01-01")["totals"] == {
        "run_seconds": 0.0,
        "tokens": 0,
        "cost_usd": 0.0,
    }

    text_out = cli(cluster, "rules", "versions", "api-rule", "--url", url)
    assert text_out.returncode == 0 and "deleted" in text_out.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: bad\ntriggers: [{type: schedule, cron: 'not a cron'}]\n")
    refused = cli(cluster, "rules", "create", str(bad), "--url", url)
    assert refused.returncode == 1
    assert "422" in refused.stderr and "triggers.0.cron" in refused.stderr
    file_rule = tmp_path / "hello.yaml"
    file_rule.write_text(UPDATED_YAML.replace("api-rule", "hello"))
    refused = cli(cluster, "rules", "update", str(file_rule), "--url", url)
    assert refused.returncode == 1 and "409" in refused.stderr and "rules sync" in refused.stderr
