"""A real `ade-tasks api` with its access log on never writes a query-string credential: a
custom hook's `?token=`, an `access_token`, a `signature`... are `[redacted]` in every line, in
the text and the JSON log formats."""

from __future__ import annotations

import json
import secrets

import pytest

from tests.integration.conftest import Cluster
from tests.support import wait_until


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_access_log_redacts_query_string_credentials(cluster: Cluster, log_format: str) -> None:
    secret = f"s3cr3t{secrets.token_hex(8)}"
    hook = {"scheme": "token", "tokens": [secret]}
    env = {
        "ADE_API_ACCESS_LOG": "true",
        "ADE_LOG_FORMAT": log_format,
        "ADE_HOOKS__DEPLOYS": json.dumps(hook),
    }
    api = cluster.api(env=env)
    child = cluster.children[-1]

    # A custom hook's URL token, right and wrong, and other credential-looking parameters
    assert api.post(f"/api/v1/webhooks/deploys?token={secret}", content=b"{}").status_code < 500
    assert api.post("/api/v1/webhooks/deploys?token=abc", content=b"{}").status_code == 401
    api.get(f"/healthz?access_token={secret}&limit=5&Signature={secret}")
    api.get(f"/api/v1/runs?limit=1&api_key={secret}&password={secret}&client_secret={secret}")

    wait_until(lambda: "/api/v1/runs?" in child.output(), 10, f"the access log ({child.log})")
    log = child.output()
    assert "token=[redacted]" in log, log
    assert "access_token=[redacted]&limit=5&Signature=[redacted]" in log, log
    assert "limit=1&api_key=[redacted]&password=[redacted]&client_secret=[redacted]" in log, log
    assert secret not in log
    assert "token=abc" not in log and "abc" not in log.replace("[redacted]", "")
    if log_format == "json":
        lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        assert any("token=[redacted]" in line["message"] for line in lines)
