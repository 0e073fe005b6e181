"""The run path on real parts: PostgreSQL, Redis, `celery worker` processes and the HTTP API."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import redis

from ade_tasks.db import run_recovery as run_recovery_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.schema import RunRow
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.conftest import write_rule
from tests.integration.conftest import Cluster
from tests.support import group_pids, host_pid, pid_alive, processes_running, rss_kib, wait_until

FINISHED = {"succeeded", "failed", "cancelled", "timed_out", "skipped"}


def add_rule(cluster: Cluster, rule_id: str, actions: str, extra: str = "") -> None:
    rules_dir = cluster.tmp / "rules"
    write_rule(
        rules_dir,
        f"{rule_id}.yaml",
        f"""
        id: {rule_id}
        triggers: [{{type: manual}}]
        execution:
          kind: built-in
          actions:
{actions}
        {extra}
        """,
    )
    cluster.sync_rules(rules_dir)


def run_row(cluster: Cluster, run_id: str) -> RunRow:
    with cluster.session_factory() as session:
        return runs_db.get_run(session, run_id)


def finished(cluster: Cluster, run_id: str, timeout: float = 30) -> RunRow:
    return wait_until(
        lambda: (row := run_row(cluster, run_id)).status in FINISHED and row,
        timeout,
        f"run {run_id} to finish",
    )


def test_manual_run_through_the_api_is_executed_by_a_worker_and_read_back(cluster: Cluster) -> None:
    add_rule(
        cluster,
        "hello",
        '            - {id: greet, type: run-command, command: "echo hello $ADE_INPUT_WHO"}',
    )
    cluster.worker()
    api = cluster.api()

    accepted = api.post("/api/v1/rules/hello/runs", json={"inputs": {"who": "ops"}})
    assert accepted.status_code == 202, accepted.text
    body = accepted.json()
    assert body["sent"] and body["created"]
    run_id = body["run_id"]

    detail = wait_until(
        lambda: (r := api.get(f"/api/v1/runs/{run_id}").json())["status"] in FINISHED and r,
        30,
        "the run to finish",
    )
    assert detail["status"] == "succeeded", detail
    assert detail["trigger_type"] == "manual" and detail["worker"]
    (step,) = detail["steps"]
    assert (step["step_id"], step["status"], step["exit_code"]) == ("greet", "succeeded", 0)
    assert step["output"] == "hello ops\n"
    listed = api.get("/api/v1/runs", params={"rule": "hello", "status": "succeeded"}).json()
    assert [item["id"] for item in listed["items"]] == [run_id]
    assert api.get("/api/v1/rules/hello").json()["document"]["id"] == "hello"


def test_idempotency_key_header_returns_the_first_run(cluster: Cluster) -> None:
    add_rule(cluster, "once", '            - {id: a, type: run-command, command: "true"}')
    api = cluster.api()
    first = api.post("/api/v1/rules/once/runs", headers={"Idempotency-Key": "deploy-42"}).json()
    second = api.post("/api/v1/rules/once/runs", headers={"Idempotency-Key": "deploy-42"}).json()
    assert second["run_id"] == first["run_id"]
    assert (first["created"], second["created"]) == (True, False)
    assert len(api.get("/api/v1/runs", params={"rule": "once"}).json()["items"]) == 1


def test_the_same_message_delivered_twice_runs_the_steps_once(
    cluster: Cluster, project: Path
) -> None:
    add_rule(
        cluster,
        "count",
        '            - {id: c, type: run-command, command: "echo x >> count; sleep 0.5"}',
    )
    cluster.worker(concurrency=2)
    sender = cluster.sender()
    result = dispatch(cluster.session_factory, sender, "count", TriggerEvent.manual())
    sender.send_run(result.run.id, queue="ade.builtin", rule_id="count")  # a duplicate delivery
    assert finished(cluster, result.run.id).status == "succeeded"

    broker = redis.Redis.from_url(cluster.settings.broker_url)
    wait_until(
        lambda: broker.llen("ade.builtin") == 0 and broker.hlen("unacked") == 0,
        15,
        "both messages to be consumed and acknowledged",
    )
    assert (project / "count").read_text() == "x\n"
    with cluster.session_factory() as session:
        assert len(run_steps_db.list_steps(session, result.run.id)) == 1


def test_timeout_kills_the_command_and_every_descendant(cluster: Cluster, project: Path) -> None:
    add_rule(
        cluster,
        "hang",
        "            - {id: h, type: run-command, timeout_sec: 1,\n"
        "               command: \"sh -c 'sleep 999.31 & echo $! >> pids; sleep 999.32' & echo $! >> pids; wait\"}",
    )
    cluster.worker()
    run_id = dispatch(
        cluster.session_factory, cluster.sender(), "hang", TriggerEvent.manual()
    ).run.id
    row = finished(cluster, run_id)
    assert row.status == "timed_out"
    assert "timed out" in (row.error or "") and "step timeout" in (row.error or "")
    assert len((project / "pids").read_text().split()) == 2  # both started
    # Their pids are the sandbox's: the host's processes are found by their arguments.
    wait_until(
        lambda: not processes_running("999.31") and not processes_running("999.32"),
        10,
        "both descendants to die",
    )


def test_ten_megabytes_of_output_are_capped_and_worker_memory_stays_flat(cluster: Cluster) -> None:
    add_rule(
        cluster,
        "loud",
        "            - {id: l, type: run-command,\n"
        '               command: "head -c 10000000 /dev/zero; echo; echo END"}',
    )
    worker = cluster.worker(concurrency=1)
    warm = dispatch(cluster.session_factory, cluster.sender(), "loud", TriggerEvent.manual()).run.id
    assert finished(cluster, warm).status == "succeeded"
    before = rss_kib(group_pids(worker.pid))
    for _ in range(3):
        run_id = dispatch(
            cluster.session_factory, cluster.sender(), "loud", TriggerEvent.manual()
        ).run.id
        assert finished(cluster, run_id).status == "succeeded"
    grown = rss_kib(group_pids(worker.pid)) - before
    with cluster.session_factory() as session:
        (step,) = run_steps_db.list_steps(session, run_id)
    assert len(step.output) <= 80_100 and step.output.rstrip().endswith("END")
    assert "characters omitted" in step.output
    assert grown < 20_000, f"worker RSS grew by {grown} KiB over three 10 MB runs"


def test_sigkill_of_the_worker_fails_the_interrupted_step_on_the_next_worker(
    cluster: Cluster, project: Path
) -> None:
    add_rule(
        cluster,
        "long",
        '            - {id: s, type: run-command, command: "echo $$ > pid; exec sleep 60"}',
    )
    victim = cluster.worker(queues="ade.builtin")
    cluster.worker(queues="ade.control")  # the recovery sweep runs here ...
    cluster.beat()  # ... sent every second by `ade-tasks beat`
    run_id = dispatch(
        cluster.session_factory, cluster.sender(), "long", TriggerEvent.manual()
    ).run.id

    def step_shown_running() -> bool:
        with cluster.session_factory() as session:
            return [s.status for s in run_steps_db.list_steps(session, run_id)] == ["running"]

    wait_until(step_shown_running, 20, "the history to show the step running")
    pid_file = project / "pid"
    command_pid = wait_until(
        lambda: pid_file.exists() and host_pid(int(pid_file.read_text()), victim.pid),
        10,
        "the command",
    )
    try:
        victim.signal(signal.SIGKILL)
        # The sweep queues the run again; the next worker records the step it cannot re-run.
        cluster.worker(queues="ade.builtin")
        row = finished(cluster, run_id, timeout=30)
    finally:
        if pid_alive(command_pid):
            os.kill(command_pid, signal.SIGKILL)
    assert row.status == "failed"
    assert "worker lost while this step ran" in (row.error or ""), row.error
    with cluster.session_factory() as session:
        (step,) = run_steps_db.list_steps(session, run_id)
        assert step.status == "failed" and step.error == run_recovery_db.STEP_WORKER_LOST


def test_broker_down_keeps_the_run_queued_and_it_runs_when_the_broker_returns(
    cluster: Cluster,
) -> None:
    add_rule(cluster, "later", '            - {id: a, type: run-command, command: "echo finally"}')
    broken = cluster.api(env={"ADE_BROKER_URL": "redis://127.0.0.1:1/0"})

    response = broken.post("/api/v1/rules/later/runs")
    assert response.status_code == 202
    body = response.json()
    assert body["created"] and not body["sent"]
    assert "not sent" in body["message"] and "unreachable" in body["message"]
    assert run_row(cluster, body["run_id"]).status == "queued"
    ready = broken.get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["database"] == "ok"
    assert ready.json()["checks"]["broker"] != "ok"

    cluster.worker(beat=True)  # the broker is back: the sweep re-sends, a worker runs it
    assert finished(cluster, body["run_id"]).status == "succeeded"


def test_api_errors_are_clear_problem_documents(cluster: Cluster) -> None:
    add_rule(cluster, "exists", '            - {id: a, type: run-command, command: "true"}')
    api = cluster.api()
    cases = [
        (api.post("/api/v1/rules/nope/runs"), 404, "rule 'nope' does not exist"),
        (api.get("/api/v1/rules/nope"), 404, "rule 'nope' does not exist"),
        (api.get("/api/v1/runs/not-a-run"), 404, "is not a run id"),
        (api.get("/api/v1/runs/00000000-0000-0000-0000-000000000000"), 404, "does not exist"),
        (api.get("/api/v1/runs", params={"limit": 501}), 422, "limit"),
        (
            api.get("/api/v1/runs", params={"cursor": "garbage"}),
            422,
            "cursor 'garbage' is not valid",
        ),
        (api.get("/api/v1/runs", params={"since": "2026-01-01T00:00:00"}), 422, "has no time zone"),
        (api.get("/api/v1/runs", params={"status": "exploded"}), 422, "status"),
        (
            api.post("/api/v1/rules/exists/runs", json={"inputs": {}, "surprise": 1}),
            422,
            "surprise",
        ),
    ]
    for response, status, detail in cases:
        assert response.status_code == status, (response.request.url, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert detail in response.json()["detail"], response.json()
    assert api.get("/readyz").status_code == 200


def test_run_history_filters_and_pages(cluster: Cluster) -> None:
    add_rule(cluster, "first", '            - {id: a, type: run-command, command: "true"}')
    add_rule(cluster, "second", '            - {id: a, type: run-command, command: "true"}')
    api = cluster.api()
    ids = [
        api.post(f"/api/v1/rules/{rule}/runs").json()["run_id"] for rule in ["first", "second"] * 3
    ]
    page = api.get("/api/v1/runs", params={"limit": 4}).json()
    rest = api.get("/api/v1/runs", params={"limit": 4, "cursor": page["next_cursor"]}).json()
    assert [r["id"] for r in page["items"] + rest["items"]] == list(reversed(ids))
    assert rest["next_cursor"] is None
    only_first = api.get("/api/v1/runs", params={"rule": "first", "trigger_type": "manual"}).json()
    assert {r["rule_id"] for r in only_first["items"]} == {"first"} and len(
        only_first["items"]
    ) == 3
    future = api.get("/api/v1/runs", params={"since": "2999-01-01T00:00:00Z"}).json()
    assert future["items"] == []


def test_cancel_other_stops_the_running_command_and_starts_the_new_run(
    cluster: Cluster, project: Path
) -> None:
    add_rule(
        cluster,
        "redeploy",
        '            - {id: s, type: run-command, command: "echo $$ >> pids; exec sleep 60"}',
        extra="guardrails: {overlap: cancel-other}",
    )
    worker = cluster.worker(concurrency=2)
    sender = cluster.sender()
    first = dispatch(cluster.session_factory, sender, "redeploy", TriggerEvent.manual()).run.id
    pids = project / "pids"
    old_pid = wait_until(
        lambda: pids.exists() and host_pid(int(pids.read_text().split()[0]), worker.pid),
        20,
        "run 1",
    )

    second = dispatch(cluster.session_factory, sender, "redeploy", TriggerEvent.manual()).run.id
    row = run_row(cluster, first)
    assert row.status == "cancelled" and "cancel-other" in (row.error or "")
    wait_until(lambda: not pid_alive(old_pid), 15, "the cancelled run's command to be killed")
    wait_until(lambda: run_row(cluster, second).status == "running", 20, "run 2 to start")
    new_pid = wait_until(
        lambda: len(pids.read_text().split()) == 2
        and host_pid(int(pids.read_text().split()[1]), worker.pid),
        20,
        "run 2's command",
    )
    os.kill(new_pid, signal.SIGKILL)  # end the test's long command
    assert finished(cluster, second).status == "failed"
