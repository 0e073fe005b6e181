"""A secret a run uses never comes back out of the cluster: not in any API answer (runs, steps,
events, the live stream, inputs, ingress events, audit, usage), not in `/metrics` and not in the
worker's log. (Flower's task arguments: tests/integration/test_flower.py; the web page:
tests/integration/test_web_pages.py.)"""

from __future__ import annotations

import json

from tests.conftest import write_rule
from tests.integration.conftest import Cluster
from tests.integration.test_run_path import finished
from tests.support import wait_until

SECRET = "s3cr3t-9a7f-never-shown"


def test_a_secret_used_by_a_run_is_in_no_answer_metric_or_log_line(cluster: Cluster) -> None:
    write_rule(cluster.tmp / "rules", "leaky.yaml", """
        id: leaky
        triggers: [{type: manual}]
        guardrails: {require_human: {requester_may_approve: true}}
        execution:
          kind: built-in
          actions:
            - id: echo
              type: run-command
              command: 'echo "token=$TOKEN"; echo "$TOKEN" | base64; printf %s "$TOKEN" >&2'
              env: {TOKEN: "${env:LEAKY_SECRET}"}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    worker = cluster.worker(env={"LEAKY_SECRET": SECRET})
    api = cluster.api()

    run_id = api.post("/api/v1/rules/leaky/runs", json={}).json()["run_id"]

    def parked() -> list[dict[str, object]]:  # require_human parks it before its step
        return [i for i in api.get("/api/v1/inputs").json() if i["run_id"] == run_id]

    (pending,) = wait_until(parked, 30, "the run to wait for its gate")
    api.post(f"/api/v1/inputs/{pending['id']}/answer", json={"answer": "accept"})
    row = finished(cluster, run_id)
    assert row.status == "succeeded", row.error

    answers = {
        path: api.get(path, params=params)
        for path, params in (
            ("/api/v1/runs", {}),
            (f"/api/v1/runs/{run_id}", {}),
            (f"/api/v1/runs/{run_id}/events", {}),
            (f"/api/v1/runs/{run_id}/events", {"follow": "true"}),  # ends: the run finished
            ("/api/v1/inputs", {"status": "approved"}),
            ("/api/v1/ingress/events", {}),
            ("/api/v1/audit", {}),
            ("/api/v1/usage", {}),
            ("/api/v1/rules/leaky", {}),
            ("/metrics", {}),
        )
    }
    detail = answers[f"/api/v1/runs/{run_id}"].json()
    assert "token=***" in detail["steps"][0]["output"]  # the step did see and print it
    for path, response in answers.items():
        assert response.status_code == 200, (path, response.text)
        assert SECRET not in response.text, path
    assert SECRET not in worker.output()
    assert SECRET not in json.dumps(detail)
