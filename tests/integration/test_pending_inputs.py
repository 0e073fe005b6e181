"""Pending inputs on a real cluster: an agent's tool call under `fallback: ask` parks its run
in `waiting` and frees the worker; operators answer through the CLI and the HTTP API.

Real parts: PostgreSQL, Redis, a `celery worker` process with one slot, the `ade-tasks api`
process, the `ade-tasks` CLI, and a scripted OpenAI-compatible model server on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ade_tasks.db import runs as runs_db
from ade_tasks.db.schema import RunRow
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.conftest import write_rule
from tests.fake_llm import ScriptedModelServer
from tests.integration.agent_run_support import text, tool_calls
from tests.integration.conftest import Cluster
from tests.integration.test_cli_cluster import cli
from tests.support import wait_until

WRITE = ("call_1", "write_file", {"path": "notes.txt", "content": "hello"})


@pytest.fixture
def llm() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def api(cluster: Cluster, llm: ScriptedModelServer) -> httpx.Client:
    rules_dir = cluster.tmp / "rules"
    write_rule(rules_dir, "asker.yaml", """
        id: asker
        triggers: [{type: manual}]
        execution:
          kind: agent-session
          provider: openai
          model: gpt-4o-mini
          permission_mode: edit
          policy: {fallback: ask}
          prompt: Write the notes.
        """)  # fmt: skip
    write_rule(rules_dir, "quick.yaml", """
        id: quick
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{type: run-command, command: "echo quick"}]}
        """)  # fmt: skip
    cluster.sync_rules(rules_dir)
    providers = {"openai": {"base_url": llm.url, "api_key": "sk-test-key"}}
    # One slot for every queue: a worker blocked on a human could run nothing else.
    cluster.worker(concurrency=1, env={"ADE_PROVIDERS": json.dumps(providers)})
    return cluster.api()


def run_row(cluster: Cluster, run_id: str) -> RunRow:
    with cluster.session_factory() as session:
        row = runs_db.get_run(session, run_id)
        session.expunge(row)
        return row


def settled(cluster: Cluster, run_id: str, status: str) -> RunRow:
    return wait_until(
        lambda: (row := run_row(cluster, run_id)).status == status and row,
        30,
        f"run {run_id} to be {status}",
    )


def start(api: httpx.Client, rule_id: str) -> str:
    response = api.post(f"/api/v1/rules/{rule_id}/runs", json={})
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


def pending_of(api: httpx.Client, run_id: str) -> dict[str, Any]:
    inputs = api.get("/api/v1/inputs").json()
    (item,) = [i for i in inputs if i["run_id"] == run_id]
    assert item["kind"] == "tool_call"  # (a question's kind is "question", a gate's "gate")
    return dict(item)


def test_accept_through_the_cli_completes_the_run_and_a_second_answer_is_refused(
    cluster: Cluster, api: httpx.Client, llm: ScriptedModelServer, project: Path
) -> None:
    llm.script(tool_calls(WRITE), text("wrote the notes"))
    run_id = start(api, "asker")
    settled(cluster, run_id, "waiting")

    # The worker's one slot is free while the run waits: another rule's run goes through.
    quick = dispatch(cluster.session_factory, cluster.sender(), "quick", TriggerEvent.manual())
    settled(cluster, quick.run.id, "succeeded")

    url = ("--url", str(api.base_url))
    listed = cli(cluster, "inputs", "list", "--json", *url)
    assert listed.returncode == 0, listed.stderr
    (item,) = [i for i in json.loads(listed.stdout) if i["run_id"] == run_id]
    assert (item["tool"], item["arguments"]) == ("write_file", WRITE[2])
    assert not (project / "notes.txt").exists()

    answered = cli(cluster, "inputs", "answer", str(item["id"]), "accept", "--by", "alice", *url)
    assert answered.returncode == 0, answered.stderr
    assert "accept by tests (alice)" in answered.stdout  # the token's name, then --by

    settled(cluster, run_id, "succeeded")
    assert (project / "notes.txt").read_text() == "hello"
    again = cli(cluster, "inputs", "answer", str(item["id"]), "decline", *url)
    assert again.returncode != 0
    assert f"input {item['id']} is not pending" in again.stderr
    assert len(llm.requests) == 2  # the resumed session did not ask the first turn again


def test_decline_through_the_api_tells_the_model_and_cancel_ends_the_run(
    cluster: Cluster, api: httpx.Client, llm: ScriptedModelServer, project: Path
) -> None:
    llm.script(tool_calls(WRITE), text("understood"), tool_calls(WRITE))
    declined_run = start(api, "asker")
    settled(cluster, declined_run, "waiting")
    item = pending_of(api, declined_run)

    response = api.post(f"/api/v1/inputs/{item['id']}/answer", json={"answer": "decline"})

    assert response.status_code == 200, response.text
    assert response.json()["input"]["status"] == "rejected"
    settled(cluster, declined_run, "succeeded")
    refusal = llm.requests[1].json["messages"][-1]
    assert refusal["role"] == "tool" and "declined by an operator" in refusal["content"]
    assert not (project / "notes.txt").exists()

    cancelled_run = start(api, "asker")
    settled(cluster, cancelled_run, "waiting")
    item = pending_of(api, cancelled_run)
    body = {"answer": "cancel", "by": "bob", "note": "not today"}
    response = api.post(f"/api/v1/inputs/{item['id']}/answer", json=body)

    assert response.status_code == 200, response.text
    row = settled(cluster, cancelled_run, "cancelled")
    assert row.error == "cancelled by tests (bob): not today"
    again = api.post(f"/api/v1/inputs/{item['id']}/answer", json={"answer": "accept"})
    assert again.status_code == 409 and "not pending" in again.json()["detail"]
    bad = api.post(f"/api/v1/inputs/{item['id']}/answer", json={"answer": "maybe"})
    assert bad.status_code == 422
    assert api.post("/api/v1/inputs/999999/answer", json={"answer": "accept"}).status_code == 404
