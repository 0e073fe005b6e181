"""Runs never wait behind ingress work: in the workers the deployment examples start (read from
deploy/docker-compose.yml), a burst of 500 events whose matching is slow does not delay manual
runs, on real PostgreSQL, Redis and `celery worker` processes.

Matching an event may take up to its 10 s bound and holds a pool process while it does (prefetch
1, late acks); were matching consumed by the run workers' pool, runs would queue behind it."""

from __future__ import annotations

import statistics
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis
import yaml
from sqlalchemy import select

from ade_tasks.db.schema import IngressEventRow, RunRow
from ade_tasks.ingress.intake import hook_row, record, store_event
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.recovery import recover
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.conftest import write_rule
from tests.integration.conftest import Cluster
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "docker-compose.yml"
BURST = 500
#: Each event's matching: long enough that a run queued behind one waits visibly, well under
#: the 10 s bound.
SLOW_MATCH_SECONDS = 4.0
RUNS = 6
#: A run may start this much later than the slowest of the same runs without the burst.
SLACK_SECONDS = 1.0


def compose_workers() -> list[tuple[str, int]]:
    """The (queues, concurrency) of each worker docker-compose.yml starts but the agent one."""
    workers = []
    for service in yaml.safe_load(COMPOSE.read_text())["services"].values():
        argv = [str(part) for part in service.get("command", [])]
        if argv[:2] != ["ade-tasks", "worker"] or "ade.agent" in argv[argv.index("-Q") + 1]:
            continue
        workers.append((argv[argv.index("-Q") + 1], int(argv[argv.index("-c") + 1])))
    return workers


def latencies(cluster: Cluster, run_ids: list[str]) -> list[float]:
    """Seconds from queued to started of each run, once all have started."""
    with cluster.session_factory() as session:
        rows = session.scalars(select(RunRow).where(RunRow.id.in_(run_ids))).all()
    assert all(row.started_at for row in rows), [row.status for row in rows]
    return sorted((row.started_at - row.queued_at).total_seconds() for row in rows)  # type: ignore[operator]


def started(cluster: Cluster, run_ids: list[str]) -> bool:
    with cluster.session_factory() as session:
        query = select(RunRow.started_at).where(RunRow.id.in_(run_ids))
        return all(value is not None for value in session.scalars(query))


def manual_runs(cluster: Cluster) -> list[str]:
    """RUNS manual runs of `hello`, sent at once as an operator's would be."""
    sender = cluster.sender()
    return [
        dispatch(cluster.session_factory, sender, "hello", TriggerEvent.manual()).run.id
        for _ in range(RUNS)
    ]


def matching_started(cluster: Cluster) -> bool:
    with cluster.session_factory() as session:
        query = select(IngressEventRow.id).where(IngressEventRow.status != "received").limit(1)
        return session.scalars(query).first() is not None or bool(_unacked(cluster))


def _unacked(cluster: Cluster) -> Any:
    return redis.Redis.from_url(cluster.settings.broker_url).hlen("unacked")


def test_a_burst_of_slow_events_does_not_delay_manual_runs(cluster: Cluster) -> None:
    # Given the deployment examples' workers (runs, and ingress matching that takes 4 s an
    # event), a manual rule, and how long its runs take to start on a quiet cluster
    write_rule(cluster.tmp / "rules", "hello.yaml", """
        id: hello
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    slow = {"ADE_TEST_SLOW_MATCH_SECONDS": str(SLOW_MATCH_SECONDS), "PYTHONPATH": str(ROOT)}
    for queues, concurrency in compose_workers():
        cluster.worker(queues, concurrency, env=slow, app="tests.integration.slow_ingress_app")
    quiet = manual_runs(cluster)
    wait_until(lambda: started(cluster, quiet), 20, "the quiet cluster's runs to start")
    usual = latencies(cluster, quiet)

    # When 500 webhook events arrive, and once their matching holds the workers, runs are sent
    sender = cluster.sender()
    for n in range(BURST):
        store_event(cluster.session_factory, sender, hook_row("deploys", f"d-{n}", {"n": n}))
    wait_until(lambda: matching_started(cluster), 10, "a worker to start matching the burst")
    busy = manual_runs(cluster)
    wait_until(lambda: started(cluster, busy), 25, "the runs sent during the burst to start")
    during = latencies(cluster, busy)

    # Then they start within their usual latency, while the burst is still being matched
    print(  # the figures the test judges by, shown with -s
        f"queued->started, s: quiet {usual}, during the burst {during} "
        f"(median {statistics.median(usual):.3f} -> {statistics.median(during):.3f})"
    )
    assert max(during) <= max(usual) + SLACK_SECONDS, (usual, during)
    with cluster.session_factory() as session:
        waiting = session.scalars(
            select(IngressEventRow.id).where(IngressEventRow.status == "received")
        ).all()
    assert len(waiting) > BURST / 2, "the burst was matched already: it proves nothing"


def test_the_recovery_sweep_sends_a_lost_event_to_the_ingress_queue(cluster: Cluster) -> None:
    # Given an event stored while its message was lost (the broker was down, say)
    event_id = record(cluster.session_factory, hook_row("deploys", "lost", {"n": 0}))
    broker = redis.Redis.from_url(cluster.settings.broker_url)

    # When the recovery sweep runs
    report = recover(cluster.session_factory, cluster.sender(), requeue_after=timedelta(0))

    # Then it sends the event where matching is consumed, not to the sweep's own queue
    assert report.resent_events == [event_id]
    assert (broker.llen("ade.ingress"), broker.llen("ade.control")) == (1, 0)
