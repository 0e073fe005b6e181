"""The metrics endpoint's aggregates and exposition, on SQLite and the in-memory broker."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from kombu import Connection
from prometheus_client.parser import text_string_to_metric_families

from ade_api.http.delivery_intake import EventIntake
from ade_api.http.deps import Services
from ade_api.http.routes import metrics as metrics_route
from ade_tasks.clock import utcnow
from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.metrics import RUN_DURATION_BUCKETS, cluster_facts
from ade_tasks.db.migrate import head_revision, upgrade
from ade_tasks.db.schema import (
    ApprovalRow,
    HookDeliveryRow,
    IngressEventRow,
    RunRow,
    ScheduleOccurrenceRow,
    UsageRow,
)
from ade_tasks.settings import EMBEDDED_BROKER_URL, Settings
from ade_tasks.testing import InMemorySender
from ade_workers.celery import metrics as worker_metrics
from ade_workers.celery.app import create_celery_app
from tests.unit.conftest import add_rule

NOW = utcnow()


def run_row(
    rule: str, status: str, seconds: float | None = None, queue: str = "ade.builtin"
) -> RunRow:
    run_id = str(uuid.uuid4())
    started = NOW - timedelta(seconds=seconds or 0) if seconds is not None else None
    return RunRow(
        id=run_id,
        rule_id=rule,
        rule_version=1,
        trigger_type="manual",
        trigger={},
        idempotency_key=run_id,
        status=status,
        billing_code=f"auto:{rule}",
        usage={},
        queue=queue,
        queued_at=NOW,
        started_at=started,
        finished_at=NOW if seconds is not None else None,
    )


@pytest.fixture
def populated(session_factory: SessionFactory, rules_dir: Path) -> SessionFactory:
    add_rule(
        session_factory,
        rules_dir,
        "billed",
        """
        id: billed
        billing_code: team-a
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{id: a, type: run-command, command: "true"}]}
        """,
    )
    add_rule(
        session_factory,
        rules_dir,
        "plain",
        """
        id: plain
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{id: a, type: run-command, command: "true"}]}
        """,
    )
    with session_factory.begin() as session:
        waiting = run_row("billed", "waiting", queue="ade.custom")
        session.add_all(
            [
                run_row("billed", "succeeded", 0.5),
                run_row("billed", "succeeded", 20),
                run_row("billed", "failed", 4000),
                run_row("plain", "queued"),
                waiting,
            ]
        )
        session.flush()
        session.add(ApprovalRow(run_id=waiting.id, step_index=0, reason="ok?", status="pending"))
        for minute, outcome in enumerate(("fired", "fired", "missed")):
            session.add(
                ScheduleOccurrenceRow(
                    rule_id="billed",
                    trigger_index=0,
                    cron="* * * * *",
                    slot=NOW - timedelta(minutes=minute),
                    claimed_by="b",
                    claimed_at=NOW,
                    outcome=outcome,
                )
            )
        session.add_all(
            [
                IngressEventRow(
                    source="github",
                    event_key="push",
                    payload={},
                    status="dispatched",
                    received_at=NOW,
                    delivery_id="1",
                ),
                IngressEventRow(
                    source="webhook:ci",
                    event_key="x",
                    payload={},
                    status="failed",
                    received_at=NOW,
                    delivery_id="2",
                ),
                HookDeliveryRow(
                    hook_id="ci",
                    received_at=NOW,
                    status_code=401,
                    outcome="bad signature",
                    headers={},
                ),
                UsageRow(
                    billing_code="team-a",
                    day="2026-01-01",
                    run_seconds=10,
                    tokens=1000,
                    cost_usd=0.25,
                ),
                UsageRow(
                    billing_code="team-a", day="2026-01-02", run_seconds=5, tokens=500, cost_usd=0.5
                ),
            ]
        )
    return session_factory


def test_cluster_facts_aggregate_the_tables(populated: SessionFactory) -> None:
    with populated() as session:
        facts = cluster_facts(session)
    assert facts.runs == {
        ("billed", "succeeded"): 2,
        ("billed", "failed"): 1,
        ("billed", "waiting"): 1,
        ("plain", "queued"): 1,
    }
    histogram = facts.durations["billed"]
    assert histogram.count == 3 and histogram.sum_seconds == pytest.approx(4020.5, abs=0.01)
    cumulative = dict(histogram.buckets)
    assert (cumulative[1], cumulative[15], cumulative[30], cumulative[3600], cumulative[7200]) == (
        1,
        1,
        2,
        2,
        3,
    )
    assert [bound for bound, _ in histogram.buckets] == list(RUN_DURATION_BUCKETS)
    assert "plain" not in facts.durations  # never started
    assert facts.occurrences == {"fired": 2, "missed": 1}
    assert facts.ingress == {("github", "dispatched"): 1, ("webhook:ci", "failed"): 1}
    assert facts.hook_deliveries == {("ci", 401): 1}
    usage = facts.usage["team-a"]
    assert (usage.tokens, usage.cost_usd, usage.run_seconds) == (1500, 0.75, 15)
    assert facts.billing_codes == {"billed": "team-a", "plain": "auto:plain"}
    assert facts.approvals_pending == {"billed": 1}
    assert facts.active_queues == ["ade.builtin", "ade.custom"]


def scrape(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def metrics_app(settings: Settings, session_factory: SessionFactory) -> TestClient:
    app = FastAPI()
    celery = create_celery_app(settings, session_factory=session_factory)
    sender = InMemorySender()
    intake = EventIntake(settings, session_factory, sender)
    app.state.services = Services(settings, session_factory, sender, celery, intake)
    app.include_router(metrics_route.router)
    return TestClient(app)


def test_the_endpoint_exposes_the_facts_and_the_queues(populated: SessionFactory) -> None:
    queues = ("ade.builtin", "ade.agent", "ade.control", "ade.custom")
    # The in-memory broker is one per process: an earlier test's messages may still be in it.
    with Connection(EMBEDDED_BROKER_URL) as connection:
        channel = connection.channel()
        for queue in queues:
            channel.queue_declare(queue)
            channel.queue_purge(queue)
    samples = scrape(metrics_app(Settings(), populated))
    assert samples[("ade_database_up", ())] == 1
    assert samples[("ade_broker_up", ())] == 1
    assert samples[("ade_runs", (("rule", "billed"), ("status", "succeeded")))] == 2
    assert samples[("ade_run_duration_seconds_count", (("rule", "billed"),))] == 3
    assert samples[("ade_run_duration_seconds_bucket", (("le", "30.0"), ("rule", "billed")))] == 2
    assert samples[("ade_run_duration_seconds_bucket", (("le", "+Inf"), ("rule", "billed")))] == 3
    assert samples[("ade_schedule_occurrences", (("outcome", "fired"),))] == 2
    assert samples[("ade_ingress_events", (("result", "failed"), ("source", "webhook:ci")))] == 1
    assert samples[("ade_hook_deliveries", (("hook", "ci"), ("status_code", "401")))] == 1
    assert samples[("ade_usage_tokens_total", (("billing_code", "team-a"),))] == 1500
    assert samples[("ade_usage_cost_usd_total", (("billing_code", "team-a"),))] == 0.75
    assert samples[("ade_rule_billing_code", (("billing_code", "team-a"), ("rule", "billed")))] == 1
    assert samples[("ade_approvals_pending", (("rule", "billed"),))] == 1
    # The configured queues and the queues of unfinished runs, empty on the in-memory broker.
    for queue in queues:
        assert samples[("ade_queue_depth", (("queue", queue),))] == 0


def test_each_live_beat_reports_its_clock_offset(session_factory: SessionFactory) -> None:
    # given three beats: one 90 s fast, one that has not read the database's clock yet, and
    # one 30 s slow that has been gone for an hour (seen now: NOW is when the module was
    # imported, minutes before this test runs in a whole suite, and a beat's liveness is
    # judged against the real clock)
    now = utcnow()
    with session_factory.begin() as session:
        for beat, offset, seen in (
            ("fast", 90.0, now),
            ("starting", None, now),
            ("gone", -30.0, now - timedelta(hours=1)),
        ):
            heartbeats_db.record(
                session, beat, heartbeats_db.BEAT, every=10, now=seen,
                detail={"clock_offset": offset},
            )  # fmt: skip
    # when /metrics is scraped, only the live beat that knows its offset has a sample
    samples = scrape(metrics_app(Settings(), session_factory))
    offsets = {k[1]: v for k, v in samples.items() if k[0] == "ade_beat_clock_offset_seconds"}
    assert offsets == {(("beat", "fast"),): 90.0}


def test_an_unreachable_broker_or_database_does_not_fail_the_scrape(tmp_path: Path) -> None:
    settings = Settings(broker_url="redis://127.0.0.1:1/0")
    missing = create_session_factory(create_db_engine(f"sqlite:///{tmp_path}/no/such/dir/ade.db"))
    samples = scrape(metrics_app(settings, missing))
    assert samples[("ade_broker_up", ())] == 0
    assert samples[("ade_database_up", ())] == 0
    assert not any(name == "ade_queue_depth" for name, _ in samples)


def test_a_scrape_between_code_and_schema_upgrade_says_so_and_does_not_fail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # New code, schema one migration behind (the rollup tables are missing): a rolling upgrade.
    engine = create_db_engine(f"sqlite:///{tmp_path}/ade.db")
    upgrade(engine, "0016")
    with caplog.at_level("WARNING", logger="ade_api.http.routes.metrics"):
        samples = scrape(metrics_app(Settings(), create_session_factory(engine)))
    assert samples[("ade_database_up", ())] == 0
    assert samples[("ade_broker_up", ())] == 1
    assert (
        f"the database schema is at revision 0016 and this code needs {head_revision()}: "
        "run `ade-tasks db upgrade`" in caplog.text
    )


def test_redis_depth_counts_every_priority_list_under_the_key_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = fakeredis.FakeServer()
    client = fakeredis.FakeRedis(server=server)

    def from_url(_url: str, **_: Any) -> redis.Redis:
        return fakeredis.FakeRedis(server=server)

    monkeypatch.setattr(redis.Redis, "from_url", from_url)
    client.lpush("p:ade.agent", "m1", "m2")
    client.lpush("p:ade.agent\x06\x163", "m3")
    client.lpush("p:ade.agent\x06\x169", "m4")
    client.lpush("ade.agent", "not ours: no prefix")
    depths = worker_metrics.queue_depths(
        "redis://localhost/0",
        ["ade.agent", "ade.builtin", "ade.agent"],
        transport_options={"global_keyprefix": "p:"},
    )
    assert depths == {"ade.agent": 4, "ade.builtin": 0}
