"""The operator's run API on real parts: filters, detail, events (JSON and followed live as
Server-Sent Events), cancel and retry, against a real `ade-tasks api` process, a real `celery
worker`, PostgreSQL and Redis; and the CLI commands that call them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from ade_tasks.clock import utcnow
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db.run_steps import StepRecord
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import StepStatus
from tests.integration.conftest import Cluster
from tests.integration.test_cli_cluster import cli
from tests.integration.test_run_path import add_rule, finished, run_row
from tests.support import Child, host_pid, pid_alive, wait_until

TWO_SLEEPS = (
    '            - {id: first, type: run-command, command: "sleep 0.5; echo one"}\n'
    '            - {id: second, type: run-command, command: "sleep 0.5; echo two"}'
)
LONG = '            - {id: long, type: run-command, command: "echo $$ >> pids; exec sleep 60"}'


def worker(cluster: Cluster) -> Child:
    """A worker with an embedded beat: its recovery sweep re-sends a run whose message went
    missing (the test Redis database is shared with other test sessions)."""
    return cluster.worker(beat=True)


def start(cluster: Cluster, rule_id: str) -> str:
    return dispatch(
        cluster.session_factory, cluster.sender(), rule_id, TriggerEvent.manual()
    ).run.id


def sse(lines: Iterator[str]) -> Iterator[tuple[str | None, str, dict[str, Any]]]:
    """(id, event, data) of a text/event-stream."""
    event_id, kind, data = None, "message", []
    for line in lines:
        if not line:
            if data:
                yield event_id, kind, json.loads("\n".join(data))
            event_id, kind, data = None, "message", []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = value
            elif name == "event":
                kind = value
            elif name == "data":
                data.append(value)


def follow(
    api: httpx.Client, run_id: str, **params: Any
) -> list[tuple[str | None, str, dict[str, Any]]]:
    """Every event of the followed run up to `end` (bounded by the read timeout)."""
    got = []
    with api.stream(
        "GET",
        f"/api/v1/runs/{run_id}/events",
        params={"follow": "true", **params},
        timeout=httpx.Timeout(10, read=30),
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for item in sse(response.iter_lines()):
            got.append(item)
            if item[1] == "end":
                break
    return got


def fast_health(api: httpx.Client) -> float:
    began = time.monotonic()
    assert api.get("/healthz", timeout=5).status_code == 200
    return time.monotonic() - began


def followers(api: httpx.Client, run_id: str) -> int:
    return int(api.get(f"/api/v1/runs/{run_id}/followers").json()["followers"])


def test_list_filters_are_validated_and_combine(cluster: Cluster) -> None:
    add_rule(cluster, "alpha", '            - {id: a, type: run-command, command: "true"}')
    add_rule(cluster, "beta", '            - {id: a, type: run-command, command: "exit 3"}')
    worker(cluster)
    api = cluster.api()
    before = utcnow() - timedelta(seconds=1)
    ok, bad = start(cluster, "alpha"), start(cluster, "beta")
    finished(cluster, ok), finished(cluster, bad)
    after = utcnow() + timedelta(seconds=1)

    def ids(**params: Any) -> list[str]:
        response = api.get("/api/v1/runs", params=params)
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]

    assert ids(rule="alpha") == [ok]
    assert ids(status="failed") == [bad]
    assert ids(trigger_type="manual", since=before.isoformat(), until=after.isoformat()) == [
        bad,
        ok,
    ]
    assert ids(until=before.isoformat()) == []
    assert ids(queue_status="completed-clean", rule="beta") == []
    queue_status = run_row(cluster, ok).queue_status
    if queue_status:
        assert ok in ids(queue_status=queue_status)
    for params, says in [
        ({"status": "bogus"}, "status"),
        ({"queue_status": "nope"}, "queue_status"),
        ({"trigger_type": "github.nothing"}, "trigger_type 'github.nothing' is unknown"),
        ({"since": "2026-01-01T00:00:00"}, "has no time zone"),
        ({"until": "yesterday"}, "until"),
        ({"since": after.isoformat(), "until": before.isoformat()}, "is not before"),
        ({"cursor": "garbage!"}, "cursor"),
    ]:
        refused = api.get("/api/v1/runs", params=params)
        assert refused.status_code == 422, (params, refused.text)
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert says in refused.json()["detail"], (params, refused.json())


def test_detail_has_steps_usage_confidence_and_capability_reports(cluster: Cluster) -> None:
    add_rule(cluster, "agentish", '            - {id: a, type: run-command, command: "true"}')
    api = cluster.api()
    run_id = start(cluster, "agentish")  # no worker: the test writes what an agent run records
    report = {"cli": "claude-code", "version": "1.2.3", "sandbox": "enforced"}
    with cluster.session_factory.begin() as session:
        run_steps_db.record_step(
            session,
            StepRecord(run_id, 0, "review", "agent-session", utcnow(), StepStatus.SUCCEEDED,
                       utcnow(), result={"input_tokens": 1200, "output_tokens": 300,
                                         "cost_usd": 0.02, "turns": 3}),
        )  # fmt: skip
        run_events_db.append_event(session, run_id, "agent.capabilities", {**report, "step": "fix"})
        for tokens in (100, 50):
            run_events_db.append_event(session, run_id, "agent.model_turn",
                                 {"step": "fix", "usage": {"input_tokens": tokens,
                                                           "output_tokens": 10}})  # fmt: skip
    detail = api.get(f"/api/v1/runs/{run_id}").json()
    assert [s["step_id"] for s in detail["steps"]] == ["review"]
    assert "confidence" in detail
    usage = detail["agent_usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (1350, 320)
    assert usage["tokens"] == 1670 and usage["cost_usd"] == 0.02
    by_step = {s["step_id"]: s for s in usage["steps"]}
    assert by_step["review"]["final"] and by_step["review"]["turns"] == 3
    assert not by_step["fix"]["final"] and by_step["fix"]["input_tokens"] == 150
    assert detail["capabilities"] == [{**report, "step": "fix"}]
    missing = api.get(f"/api/v1/runs/{'0' * 8}-0000-0000-0000-{'0' * 12}")
    assert missing.status_code == 404 and "does not exist" in missing.json()["detail"]


def test_events_as_json_page_with_after(cluster: Cluster) -> None:
    add_rule(cluster, "noisy", '            - {id: a, type: run-command, command: "true"}')
    api = cluster.api()
    run_id = start(cluster, "noisy")
    with cluster.session_factory.begin() as session:
        for n in range(5):
            run_events_db.append_event(session, run_id, "test.line", {"n": n})
    events = api.get(f"/api/v1/runs/{run_id}/events").json()
    assert [e["data"]["n"] for e in events] == [0, 1, 2, 3, 4]
    assert all(e["kind"] == "test.line" and e["id"] for e in events)
    page = api.get(f"/api/v1/runs/{run_id}/events", params={"after": events[1]["id"], "limit": 2})
    assert [e["data"]["n"] for e in page.json()] == [2, 3]
    assert api.get(f"/api/v1/runs/{run_id}/events", params={"after": -1}).status_code == 422
    assert api.get("/api/v1/runs/not-a-run/events").status_code == 404


def test_follow_streams_existing_events_then_steps_and_ends_when_the_run_ends(
    cluster: Cluster,
) -> None:
    add_rule(cluster, "steps", TWO_SLEEPS)
    api = cluster.api()
    run_id = start(cluster, "steps")
    with cluster.session_factory.begin() as session:
        run_events_db.append_event(session, run_id, "test.before", {"n": 1})
    result: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: result.update(events=follow(api, run_id)))
    reader.start()
    wait_until(lambda: followers(api, run_id) == 1, 10, "the follower to connect")
    worker(cluster)
    reader.join(60)
    assert not reader.is_alive(), "the stream did not end"
    events = result["events"]
    kinds = [kind for _, kind, _ in events]
    assert kinds[0] == "run.status" and events[0][2]["data"]["status"] == "queued"
    before = next(e for e in events if e[1] == "test.before")
    assert before[0] is not None and int(before[0]) == before[2]["id"]  # `id:` = the event id
    steps = [(kind, body["data"]["index"]) for _, kind, body in events if kind.startswith("step.")]
    assert steps == [("step.started", 0), ("step.finished", 0), ("step.started", 1),
                     ("step.finished", 1)]  # fmt: skip
    done = [body["data"] for _, kind, body in events if kind == "step.finished"]
    assert [d["status"] for d in done] == ["succeeded", "succeeded"]
    assert done[1]["output_tail"] == "two"
    assert "running" in [body["data"]["status"] for _, kind, body in events if kind == "run.status"]
    assert kinds[-1] == "end" and events[-1][2]["data"]["status"] == "succeeded"
    # A finished run's stream: the whole story at once, then `end`.
    again = follow(api, run_id)
    assert [k for _, k, _ in again if k.startswith("step.")] == [k for k in kinds if
                                                                  k.startswith("step.")]  # fmt: skip
    assert again[-1][1] == "end"
    # Reconnecting after the last event id sends no real event again.
    resumed = follow(api, run_id, after=before[2]["id"])
    assert "test.before" not in [k for _, k, _ in resumed] and resumed[-1][1] == "end"


def test_a_client_leaving_mid_stream_ends_its_server_side_follower(
    cluster: Cluster, project: Path
) -> None:
    add_rule(cluster, "long", LONG)
    worker(cluster)
    api = cluster.api()
    run_id = start(cluster, "long")
    pids = project / "pids"
    wait_until(lambda: pids.exists() and pids.read_text().strip(), 20, "the command to start")
    for _ in range(3):
        with api.stream("GET", f"/api/v1/runs/{run_id}/events", params={"follow": "true"},
                        timeout=httpx.Timeout(10, read=10)) as response:  # fmt: skip
            stream = sse(response.iter_lines())  # kept: dropping it closes the response
            assert next(stream)[1] == "run.status"
            assert followers(api, run_id) == 1
        # closed mid-stream: the server notices and drops the follower
        wait_until(lambda: followers(api, run_id) == 0, 5, "the server to drop the follower")
        assert fast_health(api) < 1.0
    assert api.post(f"/api/v1/runs/{run_id}/cancel").status_code == 200


def test_a_hundred_followers_all_see_the_end_and_the_api_stays_responsive(
    cluster: Cluster,
) -> None:
    add_rule(cluster, "watched", TWO_SLEEPS)
    api = cluster.api()
    run_id = start(cluster, "watched")
    results: list[list[Any]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def one() -> None:
        try:
            with httpx.Client(base_url=api.base_url, headers=api.headers) as client:
                got = follow(client, run_id)
            with lock:
                results.append(got)
        except BaseException as exc:  # reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(100)]
    for thread in threads:
        thread.start()
    wait_until(lambda: followers(api, run_id) == 100, 30, "100 followers to connect")
    latencies = [fast_health(api) for _ in range(5)]
    assert max(latencies) < 1.0, latencies
    # /healthz is probed from before the worker starts until every follower has its end (a
    # fast worker can finish the run before a probe started after it would get one in).
    slow: list[float] = []
    storm_over = threading.Event()

    def probe() -> None:
        try:
            while not storm_over.is_set():
                slow.append(fast_health(api))
                time.sleep(0.1)
        except BaseException as exc:  # reported below, with the followers' errors
            with lock:
                errors.append(exc)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    worker(cluster)
    for thread in threads:
        thread.join(60)
    storm_over.set()
    prober.join(5)
    assert not errors, errors[:3]
    assert len(results) == 100
    for got in results:
        assert got[-1][1] == "end" and got[-1][2]["data"]["status"] == "succeeded"
        assert [k for _, k, _ in got].count("step.finished") == 2
    print(f"/healthz during the storm: {len(slow)} calls, slowest {max(slow):.3f}s")
    assert max(slow) < 1.0, max(slow)
    wait_until(lambda: followers(api, run_id) == 0, 5, "the followers to leave")


def test_cancel_queued_running_and_finished_runs(cluster: Cluster, project: Path) -> None:
    add_rule(cluster, "long", LONG)
    add_rule(cluster, "quick", '            - {id: a, type: run-command, command: "true"}')
    api = cluster.api()
    queued = start(cluster, "long")  # no worker yet
    cancelled = api.post(f"/api/v1/runs/{queued}/cancel", json={"by": "ops", "note": "not now"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["was"] == "queued"
    assert cancelled.json()["run"]["status"] == "cancelled"
    assert cancelled.json()["run"]["error"] == "cancelled by tests (ops): not now"
    events = api.get(f"/api/v1/runs/{queued}/events").json()
    assert [(e["kind"], e["data"]["was"]) for e in events] == [("run.cancelled", "queued")]

    taker = worker(cluster)  # the cancelled run's message is taken and does nothing
    finished(cluster, start(cluster, "quick"))
    assert run_row(cluster, queued).status == "cancelled"
    assert api.get(f"/api/v1/runs/{queued}").json()["steps"] == []

    running = start(cluster, "long")
    pids = project / "pids"
    pid = wait_until(
        lambda: pids.exists() and host_pid(int(pids.read_text().split()[0]), taker.pid),
        20,
        "the step",
    )
    wait_until(
        lambda: api.get(f"/api/v1/runs/{running}").json()["steps"][0]["status"] == "running",
        10,
        "the step to show as running",
    )
    stopped = api.post(f"/api/v1/runs/{running}/cancel")
    assert stopped.status_code == 200 and stopped.json()["was"] == "running"
    wait_until(lambda: not pid_alive(pid), 15, "the cancelled step's command to be killed")
    detail = api.get(f"/api/v1/runs/{running}").json()
    assert detail["status"] == "cancelled"
    (step,) = detail["steps"]
    assert step["status"] == "failed" and step["error"] == "cancelled by tests"  # token's name

    again = api.post(f"/api/v1/runs/{running}/cancel")
    assert again.status_code == 409
    assert again.headers["content-type"].startswith("application/problem+json")
    assert (
        again.json()["detail"] == f"run {running} already finished (cancelled); nothing to cancel"
    )
    assert fast_health(api) < 1.0
    assert api.post("/api/v1/runs/nope/cancel").status_code == 404


def test_retry_starts_a_linked_run_that_succeeds(cluster: Cluster, project: Path) -> None:
    add_rule(
        cluster,
        "flaky",
        '            - {id: a, type: run-command, command: "test -f flag || { touch flag; exit 3; }"}',
    )
    add_rule(cluster, "long", LONG)
    worker(cluster)
    api = cluster.api()
    first = start(cluster, "flaky")
    assert finished(cluster, first).status == "failed"
    retried = api.post(f"/api/v1/runs/{first}/retry", json={"by": "ops"})
    assert retried.status_code == 202, retried.text
    body = retried.json()
    assert body["retry_of"] == first and body["created"] and body["run_id"] != first
    second = finished(cluster, body["run_id"])
    assert second.status == "succeeded"
    assert second.trigger["retry_of"] == first and second.trigger_type == "manual"
    kinds = [(e["kind"], e["data"]) for e in api.get(f"/api/v1/runs/{first}/events").json()]
    assert ("run.retried", {"retry": body["run_id"], "by": "tests (ops)"}) in kinds
    twice = api.post(f"/api/v1/runs/{first}/retry", headers={"Idempotency-Key": "k1"})
    same = api.post(f"/api/v1/runs/{first}/retry", headers={"Idempotency-Key": "k1"})
    assert twice.json()["run_id"] == same.json()["run_id"] and not same.json()["created"]

    active = start(cluster, "long")
    wait_until(lambda: run_row(cluster, active).status == "running", 20, "the long run")
    refused = api.post(f"/api/v1/runs/{active}/retry")
    assert refused.status_code == 409 and "still running" in refused.json()["detail"]
    api.post(f"/api/v1/runs/{active}/cancel")


def test_cli_follows_runs_and_cancels_and_retries(cluster: Cluster) -> None:
    add_rule(cluster, "steps", TWO_SLEEPS)
    add_rule(cluster, "broken", '            - {id: boom, type: run-command, command: "exit 4"}')
    worker(cluster)
    api = cluster.api()
    url = str(api.base_url)

    waited = cli(cluster, "run", "steps", "--wait", "--url", url)
    assert waited.returncode == 0, waited.stderr
    lines = waited.stdout.splitlines()
    assert "  step 1 first (run-command) started" in lines
    assert "  step 1 first (run-command) succeeded, exit 0" in lines
    assert "  step 2 second (run-command) succeeded, exit 0" in lines
    assert "      | two" in lines
    assert lines[-1].startswith("run ") and " succeeded after " in lines[-1]
    run_id = lines[0].split()[1].rstrip(":")

    failed = cli(cluster, "run", "broken", "--wait", "--url", url)
    assert failed.returncode == 1 and "step 1 boom (run-command) failed, exit 4" in failed.stdout

    followed = cli(cluster, "runs", "events", run_id, "--follow", "--url", url)
    assert followed.returncode == 0, followed.stderr
    assert "step.finished" in followed.stdout and "step 2 second (run-command) succeeded" in (
        followed.stdout
    )
    assert followed.stdout.splitlines()[-1].split()[2:4] == ["end", "run"]
    as_json = cli(cluster, "runs", "events", run_id, "--follow", "--json", "--url", url)
    parsed = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert parsed[-1]["kind"] == "end" and parsed[-1]["data"]["status"] == "succeeded"

    refused = cli(cluster, "runs", "cancel", run_id, "--url", url)
    assert refused.returncode == 1 and "already finished (succeeded); nothing to cancel" in (
        refused.stderr
    )
    retried = cli(cluster, "runs", "retry", run_id, "--wait", "--url", url)
    assert retried.returncode == 0, retried.stderr
    assert f"retries {run_id}" in retried.stdout and "step 2 second" in retried.stdout
    page = cli(cluster, "runs", "page", "--rule", "steps", "--limit", "1", "--url", url)
    assert page.returncode == 0 and "(more: --cursor " in page.stdout
    every = cli(cluster, "runs", "page", "--rule", "steps", "--limit", "1", "--all", "--json",
                "--url", url)  # fmt: skip
    assert every.returncode == 0, every.stderr
    assert every.stdout.count('"next_cursor"') == 2
