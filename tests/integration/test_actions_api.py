"""`GET /api/v1/actions` and `ade-tasks actions list` against a real `ade-tasks api` process:
a viewer token reads the allow-list and step types, no token is refused, and the CLI prints what
the API answers."""

from __future__ import annotations

import httpx

from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.rules.action_reference import catalog
from tests.integration.conftest import Cluster
from tests.integration.test_cli_cluster import cli


def test_a_viewer_reads_the_allow_list_and_the_cli_prints_it(cluster: Cluster) -> None:
    # Given a running API and a viewer token
    api = cluster.api()
    with cluster.session_factory.begin() as session:
        _, viewer = tokens_db.create_token(session, "reader", Role.VIEWER, "tests")
    headers = {"Authorization": f"Bearer {viewer}"}

    # When the viewer asks for the actions, and someone asks without a token
    answer = httpx.get(f"{api.base_url}/api/v1/actions", headers=headers, timeout=10)
    anonymous = httpx.get(f"{api.base_url}/api/v1/actions", timeout=10)

    # Then the viewer gets the whole catalog, and no token gets 401
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body == catalog()
    cancel = next(action for action in body["ade_actions"] if action["name"] == "runs.cancel")
    assert cancel["rule_origins"] == ["rules-dir"]
    assert cancel["arguments"][0]["name"] == "run_id"
    assert anonymous.status_code == 401
    # And the OpenAPI document names its response model
    schema = api.get("/openapi.json").json()["paths"]["/api/v1/actions"]["get"]
    assert schema["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ActionsOut"
    }

    # When the CLI lists them through the API (as the viewer)
    env = {**cluster.env, "ADE_API_URL": str(api.base_url), "ADE_API_TOKEN": viewer}
    shown = cli(cluster, "actions", "list", env=env)

    # Then it prints each action with its arguments and who may call it, and the step types
    assert shown.returncode == 0, shown.stderr
    assert "runs.cancel" in shown.stdout
    assert "who may call it: the rules directory; admin-only" in shown.stdout
    assert "args.run_id: the run to cancel" in shown.stdout
    assert "run-command" in shown.stdout and "every step also has: id, condition" in shown.stdout
