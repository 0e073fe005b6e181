"""Metrics and JSON logs on real parts: PostgreSQL, Redis, `celery worker` processes, and the
API's `/metrics` served over HTTP by uvicorn."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from ade_api.http.app import create_app
from ade_api.http.routes import metrics as metrics_route
from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from ade_tasks.db.schema import ApprovalRow, UsageRow
from ade_tasks.db.tokens import create_token
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings
from tests.integration.conftest import Cluster, own_redis_db
from tests.integration.test_run_path import add_rule, finished
from tests.support import free_port, redis_db_url, wait_until
from tests.unit.deploy.test_monitoring import used_metrics

#: A Redis DB index of this module's own: exact queue depths must not see (or lose) the messages
#: of tests running at the same time on the shared index 13 of `tests/integration/conftest.py`.
REDIS_URL = redis_db_url(2)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: httpx.Client, headers: dict[str, str] | None = None) -> Samples:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@pytest.fixture
def redis_url() -> Iterator[str]:
    yield from own_redis_db(REDIS_URL)


@pytest.fixture
def serve(cluster: Cluster) -> Iterator[Callable[[Settings], httpx.Client]]:
    """Serve the real app (with the metrics router) by uvicorn on a free port in a thread."""
    servers: list[tuple[uvicorn.Server, threading.Thread, httpx.Client]] = []

    def start(settings: Settings) -> httpx.Client:
        app = create_app(settings, session_factory=cluster.session_factory)
        if not any(getattr(route, "path", None) == "/metrics" for route in app.routes):
            app.include_router(metrics_route.router)
        port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        wait_until(lambda: server.started, 15, "uvicorn to serve the metrics app")
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        servers.append((server, thread, client))
        return client

    yield start
    for server, thread, client in servers:
        client.close()
        server.should_exit = True
        thread.join(10)


def test_metrics_are_open_only_when_configured(
    cluster: Cluster, serve: Callable[[Settings], httpx.Client]
) -> None:
    closed = serve(cluster.settings)
    assert closed.get("/metrics").status_code == 401
    with cluster.session_factory.begin() as session:
        _, token = create_token(session, "prometheus", Role.VIEWER, "test")
    headers = {"Authorization": f"Bearer {token}"}
    assert scrape(closed, headers)[("ade_database_up", ())] == 1
    public = serve(cluster.settings.model_copy(update={"metrics_public": True}))
    assert scrape(public)[("ade_database_up", ())] == 1


def test_metrics_report_runs_queues_usage_and_approvals(
    cluster: Cluster, serve: Callable[[Settings], httpx.Client]
) -> None:
    metrics_api = serve(cluster.settings.model_copy(update={"metrics_public": True}))
    add_rule(cluster, "good", '            - {id: a, type: run-command, command: "true"}')
    add_rule(cluster, "bad", '            - {id: a, type: run-command, command: "exit 3"}')
    cluster.worker(queues="ade.builtin,ade.control")  # nobody consumes ade.agent
    sender = cluster.sender()
    good = dispatch(cluster.session_factory, sender, "good", TriggerEvent.manual()).run.id
    bad = dispatch(cluster.session_factory, sender, "bad", TriggerEvent.manual()).run.id
    assert finished(cluster, good).status == "succeeded"
    assert finished(cluster, bad).status == "failed"
    # Two messages wait in the idle ade.agent queue: one plain, one in a priority list.
    sender.send_run("not-a-run-1", queue="ade.agent", rule_id="good")
    cluster.celery.send_task(
        "ade.runs.execute", args=["not-a-run-2"], queue="ade.agent", priority=5
    )
    with cluster.session_factory.begin() as session:
        session.add(UsageRow(billing_code="auto:good", day="2026-01-01", tokens=1200, cost_usd=0.3))
        session.add(UsageRow(billing_code="auto:good", day="2026-01-02", tokens=800, cost_usd=0.2))
        session.add(
            ApprovalRow(
                run_id=bad, step_index=0, reason="go on?", status="pending", requested_at=utcnow()
            )
        )

    samples = scrape(metrics_api)

    assert samples[("ade_database_up", ())] == 1 and samples[("ade_broker_up", ())] == 1
    assert samples[("ade_runs", (("rule", "good"), ("status", "succeeded")))] == 1
    assert samples[("ade_runs", (("rule", "bad"), ("status", "failed")))] == 1
    assert not [k for k in samples if k[0] == "ade_runs" and dict(k[1])["status"] == "queued"]
    for rule in ("good", "bad"):
        assert samples[("ade_run_duration_seconds_count", (("rule", rule),))] == 1
        assert samples[("ade_run_duration_seconds_bucket", (("le", "+Inf"), ("rule", rule)))] == 1
        assert samples[("ade_run_duration_seconds_bucket", (("le", "60.0"), ("rule", rule)))] == 1
    assert samples[("ade_queue_depth", (("queue", "ade.agent"),))] == 2
    assert samples[("ade_queue_depth", (("queue", "ade.builtin"),))] == 0
    assert samples[("ade_queue_depth", (("queue", "ade.ingress"),))] == 0  # listed, and consumed
    assert samples[("ade_usage_tokens_total", (("billing_code", "auto:good"),))] == 2000
    assert samples[("ade_usage_cost_usd_total", (("billing_code", "auto:good"),))] == 0.5
    assert (
        samples[("ade_rule_billing_code", (("billing_code", "auto:good"), ("rule", "good")))] == 1
    )
    assert samples[("ade_approvals_pending", (("rule", "bad"),))] == 1


def test_a_worker_serves_its_task_counters(cluster: Cluster) -> None:
    add_rule(cluster, "hello", '            - {id: a, type: run-command, command: "echo hi"}')
    add_rule(cluster, "broken", '            - {id: a, type: run-command, command: "exit 1"}')
    port = free_port()
    cluster.worker(env={"ADE_WORKER_METRICS_PORT": str(port)})
    sender = cluster.sender()
    runs = [
        dispatch(cluster.session_factory, sender, "hello", TriggerEvent.manual()).run.id
        for _ in range(2)
    ]
    for run_id in runs:
        assert finished(cluster, run_id).status == "succeeded"
    broken = dispatch(cluster.session_factory, sender, "broken", TriggerEvent.manual()).run.id
    assert finished(cluster, broken).status == "failed"
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)
    tasks = ("ade_worker_tasks_total", (("outcome", "success"), ("task", "ade.runs.execute")))
    # A failed run's task is a failed task (issue 37): Flower and these counters say so.
    failures = ("ade_worker_tasks_total", (("outcome", "failure"), ("task", "ade.runs.execute")))
    # The counters are written after the run's status: poll until the tasks have ended.
    samples = wait_until(
        lambda: (s := scrape(client)).get(tasks) == 2 and s.get(failures) == 1 and s,
        15,
        "the tasks to be counted",
    )
    assert samples[("ade_worker_runs_total", (("rule", "hello"), ("status", "succeeded")))] == 2
    assert samples[("ade_worker_runs_total", (("rule", "broken"), ("status", "failed")))] == 1
    duration = ("ade_worker_task_duration_seconds_count", (("task", "ade.runs.execute"),))
    assert samples[duration] == 3


def test_json_logs_carry_the_run_on_every_line_and_never_the_secret(cluster: Cluster) -> None:
    secret = "hunter2-very-secret-value"
    add_rule(
        cluster,
        "leaky",
        "            - id: a\n"
        "              type: run-command\n"
        '              command: "echo token=$TOKEN; exit 1"\n'
        "              env: {TOKEN: '${env:DEPLOY_TOKEN}'}",
    )
    worker = cluster.worker(env={"ADE_LOG_FORMAT": "json", "DEPLOY_TOKEN": secret})
    result = dispatch(cluster.session_factory, cluster.sender(), "leaky", TriggerEvent.manual())
    run_id = result.run.id
    row = finished(cluster, run_id)
    assert row.status == "failed"
    # Celery logs the task's end after the run's outcome is written; wait for that line (a
    # failed run's task ends as a failed task: `raised expected: RunFailedError(...)`).
    ending = "raised expected"
    wait_until(lambda: ending in worker.output(), 15, "Celery to log the task's end")

    mentioning = [line for line in worker.output().splitlines() if run_id in line]
    assert len(mentioning) >= 2, worker.output()
    task_ids = set()
    for line in mentioning:
        entry = json.loads(line)
        assert entry["run_id"] == run_id and entry["rule_id"] == "leaky", line
        task_ids.add(entry["task_id"])
        assert {"ts", "level", "logger", "message"} <= set(entry)
    assert len(task_ids) == 1 and None not in task_ids
    # Celery's own line about the task's end (it names the task, not the run) carries the run.
    (task_id,) = task_ids
    (ended,) = [line for line in worker.output().splitlines() if ending in line]
    assert task_id in ended and json.loads(ended)["run_id"] == run_id
    assert any("finished: failed" in json.loads(line)["message"] for line in mentioning)
    assert secret not in worker.output()
    assert row.finished_at is not None and row.started_at is not None
    assert row.finished_at - row.started_at < timedelta(minutes=1)


def test_every_metric_the_alerts_and_dashboard_use_is_exported(
    cluster: Cluster, serve: Callable[[Settings], httpx.Client]
) -> None:
    """Issue 37, finding 11: deploy/prometheus/ade-alerts.yml and deploy/grafana/ade-dashboard.json
    name only series a real scrape of the API's /metrics holds (a renamed metric fails here)."""
    # Given the API on PostgreSQL and Redis, scraped as Prometheus scrapes it
    client = serve(cluster.settings.model_copy(update={"metrics_public": True}))
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    exported: set[str] = set()
    for family in text_string_to_metric_families(response.text):
        # An empty family still says its name and type; its series carry the type's suffixes.
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
        exported |= {family.name, *(family.name + s for s in suffixes.get(family.type, []))}
        exported |= {sample.name for sample in family.samples}

    # Then every metric an alert or a panel uses is among them
    used = used_metrics()
    missing = {name: sorted(where) for name, where in used.items() if name not in exported}
    assert not missing, f"not in /metrics: {missing}"
    assert len(used) >= 10
