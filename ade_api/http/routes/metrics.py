"""`GET /metrics`: the cluster's state in the Prometheus text format.

Every value is read at scrape time, from the database (`ade_tasks.db.metrics.cluster_facts`) and
from the broker (`ade_workers.celery.metrics.queue_depths`), by a custom collector. Nothing is
counted in the API process itself, so the endpoint is multiprocess-safe by construction: any of
several API processes (`ade-tasks api --workers N`, several hosts) answers with the same
cluster-wide numbers, and none is lost when a process restarts. For the same reason the endpoint
does not expose the default registry (the Python/process metrics of whichever API process happened
to answer); per-worker counters are on each worker's own port (`worker_metrics_port`).

A part that does not answer does not fail the scrape: `ade_database_up` or `ade_broker_up` is 0
and that part's metrics are left out. A database connection that died under the scrape (a
restart, a failover) is replaced and the read repeated once before the database counts as down.

Access: with `metrics_public` false (the default) the route needs a viewer token like the rest of
the API (the API's auth middleware reads the setting); with it true, anyone who reaches the API may
scrape it. The labels carry rule ids, statuses, sources, hook ids, billing codes and queue names,
never a secret or a payload.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import text

from ade_api.http.deps import Services, ServicesDep
from ade_api.http.health_state import health_of, live_state
from ade_tasks.clock import utcnow
from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db import partitions as partitions_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.metrics import STATEMENT_TIMEOUT_MS, ClusterFacts, cluster_facts
from ade_tasks.db.migrate import schema_lag
from ade_tasks.db.retry import retrying
from ade_workers.celery.metrics import queue_depths

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

log = logging.getLogger(__name__)

router = APIRouter(tags=["metrics"])

#: How long the broker probe may take before the broker counts as down for this scrape.
BROKER_TIMEOUT_SECONDS = 2.0

LabelKey = TypeVar("LabelKey", bound="SupportsRichComparison")
"""A sample's key: its label value, or a tuple of them (one per label); samples sort by it."""


class ClusterCollector(Collector):
    """Collects the cluster's metrics from the database and the broker on every scrape."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def collect(self) -> Iterator[Metric]:
        facts = self._facts()
        yield GaugeMetricFamily(
            "ade_database_up",
            "1 when the database answered this scrape.",
            value=int(facts is not None),
        )
        if facts is not None:
            yield from _database_metrics(facts)
            yield from self._rule_ready()
            yield from self._partitions()
        yield from self._broker_metrics(facts.active_queues if facts else [])

    def _facts(self) -> ClusterFacts | None:
        try:  # once more on a fresh connection if the pooled one died (a restart, a failover)
            return retrying(
                self.services.session_factory, cluster_facts, what="metrics scrape", attempts=2
            )
        except Exception as exc:  # report it as ade_database_up 0, not as a failed scrape
            # Mid-upgrade (new code, old schema) the database answers but a table is missing:
            # say so, rather than leave the operator to read "the database is down".
            lag = schema_lag(self.services.session_factory.kw["bind"])
            log.warning("metrics: the database did not answer: %s", lag or type(exc).__name__)
            return None

    def _rule_ready(self) -> Iterator[Metric]:
        try:
            with self.services.session_factory() as session:
                state = live_state(session, self.services.settings)
                ready = {
                    row.id: int(health_of(row, state).ready) for row in rules_db.list_rules(session)
                }
        except Exception as exc:  # the database went away after the facts: leave it out
            log.warning("metrics: rule health not read: %s", type(exc).__name__)
            return
        drains = {
            (h.relay or "", h.process_id): int(h.error is None)
            for h in state.alive(heartbeats_db.RELAY_DRAIN)
        }
        yield _gauge(
            "ade_relay_drain_ok",
            "Per live relay drain (a beat that drained within its slot): 1 when its last drain "
            "succeeded, 0 when it failed (relay down, token refused, non-advancing cursor).",
            ["relay", "drainer"],
            drains,
        )
        polls = {
            (h.process_id, repo): found
            for h in state.alive(heartbeats_db.POLLER)
            for repo, found in h.polls.items()
        }
        yield _gauge(
            "ade_github_poll_ok",
            "Per live GitHub poller and repository it polled: 1 when its latest poll succeeded, "
            "0 when it failed (no or a refused token, GitHub unreachable).",
            ["poller", "repo"],
            {key: int(not found.failing) for key, found in polls.items()},
        )
        yield _gauge(
            "ade_github_poll_last_success_seconds",
            "Per live GitHub poller and repository it polled: when a poll of it last succeeded "
            "(Unix time; 0: never).",
            ["poller", "repo"],
            {key: found.ok_at.timestamp() if found.ok_at else 0 for key, found in polls.items()},
        )
        offsets = {
            h.process_id: h.clock_offset
            for h in state.alive(heartbeats_db.BEAT)
            if h.clock_offset is not None
        }
        yield _gauge(
            "ade_beat_clock_offset_seconds",
            "Per live beat: seconds its machine's clock is ahead of the database's (negative: "
            "behind). Beats judge schedules by the database's clock; beyond 2 s a beat logs it.",
            ["beat"],
            offsets,
        )
        yield _gauge(
            "ade_rule_ready",
            "1 when the rule can fire (its health is ready: every trigger has a path that fires "
            "it and no pause holds it, nothing stops the rule), 0 when not; enabled or not.",
            ["rule"],
            ready,
        )
        paused = {
            (rule_id, "all" if p.trigger_index is None else p.trigger_index, p.paused_by, p.note): (
                p.paused_at.timestamp()
            )
            for rule_id, found in state.pauses.items()
            for p in found
        }
        yield _gauge(
            "ade_rule_paused_since_seconds",
            "Per pause: when it was set (Unix time), with who set it and its note; trigger "
            "`all` holds every automatic trigger of the rule, a number only that trigger.",
            ["rule", "trigger", "paused_by", "note"],
            paused,
        )

    def _partitions(self) -> Iterator[Metric]:
        try:
            with self.services.session_factory() as session:
                if session.get_bind().dialect.name == "postgresql":
                    session.execute(text(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}"))
                facts = partitions_db.partition_facts(session, utcnow())
        except Exception as exc:  # a lock of a migration or of the partition job: leave it out
            log.warning("metrics: history partitions not read: %s", type(exc).__name__)
            return
        if facts is None:  # SQLite, or not yet migrated: nothing is partitioned
            return
        yield _gauge(
            "ade_history_partition_ahead_seconds",
            "Per history table: seconds until the last monthly partition made ahead ends "
            "(the partition job keeps three months ahead; alert well before it reaches 0, when "
            "new rows start landing in the DEFAULT partition).",
            ["table"],
            facts.ahead_seconds,
        )
        yield _gauge(
            "ade_history_default_partition_rows",
            "Per history table: rows in its DEFAULT partition (counted up to 10,000); above 0 "
            "means some rows fall outside every month's partition.",
            ["table"],
            facts.default_rows,
        )

    def _broker_metrics(self, active_queues: list[str]) -> Iterator[Metric]:
        conf = self.services.celery.conf
        configured = [queue.name for queue in conf.task_queues or ()]
        try:
            depths = queue_depths(
                conf.broker_url or self.services.settings.broker_url,
                [*configured, *active_queues],
                timeout=BROKER_TIMEOUT_SECONDS,
                transport_options=conf.broker_transport_options,
            )
        except Exception as exc:  # the error class only: a message might quote the broker URL
            log.warning("metrics: the broker did not answer: %s", type(exc).__name__)
            depths = None
        yield GaugeMetricFamily(
            "ade_broker_up",
            "1 when the broker answered this scrape.",
            value=int(depths is not None),
        )
        if depths is not None:
            yield _gauge(
                "ade_queue_depth", "Messages waiting in a broker queue.", ["queue"], depths
            )


def _gauge(
    name: str, documentation: str, labels: list[str], values: Mapping[LabelKey, float]
) -> GaugeMetricFamily:
    """A gauge family with one sample per key of `values` (a label value or a tuple of them)."""
    gauge = GaugeMetricFamily(name, documentation, labels=labels)
    for key, value in sorted(values.items()):
        gauge.add_metric([str(part) for part in (key if isinstance(key, tuple) else (key,))], value)
    return gauge


def _database_metrics(facts: ClusterFacts) -> Iterator[Metric]:
    yield _gauge(
        "ade_runs",
        "Runs recorded, by rule and status (pruning history does not lower the finished ones).",
        ["rule", "status"],
        facts.runs,
    )

    durations = HistogramMetricFamily(
        "ade_run_duration_seconds",
        "Start-to-finish time of the finished runs, by rule.",
        labels=["rule"],
    )
    for rule, histogram in sorted(facts.durations.items()):
        buckets = [(str(float(bound)), float(n)) for bound, n in histogram.buckets]
        buckets.append(("+Inf", float(histogram.count)))
        durations.add_metric([rule], buckets, histogram.sum_seconds)
    yield durations

    yield _gauge(
        "ade_schedule_occurrences",
        "Schedule occurrences the database holds, by outcome (claimed, fired, skipped, missed).",
        ["outcome"],
        facts.occurrences,
    )

    yield _gauge(
        "ade_ingress_events",
        "Webhook deliveries and local events the database holds, by source and result "
        "(received, dispatched, failed).",
        ["source", "result"],
        facts.ingress,
    )

    yield _gauge(
        "ade_hook_deliveries",
        "Recent deliveries to custom webhooks (the newest 50 per hook), by hook and HTTP status "
        "answered, rejected ones included.",
        ["hook", "status_code"],
        facts.hook_deliveries,
    )

    tokens = CounterMetricFamily(
        "ade_usage_tokens", "Agent tokens used, by billing code.", labels=["billing_code"]
    )
    cost = CounterMetricFamily(
        "ade_usage_cost_usd", "Agent cost in US dollars, by billing code.", labels=["billing_code"]
    )
    seconds = CounterMetricFamily(
        "ade_usage_run_seconds", "Run time used, by billing code.", labels=["billing_code"]
    )
    for code, totals in sorted(facts.usage.items()):
        tokens.add_metric([code], totals.tokens)
        cost.add_metric([code], totals.cost_usd)
        seconds.add_metric([code], totals.run_seconds)
    yield tokens
    yield cost
    yield seconds

    rules = GaugeMetricFamily(
        "ade_rule_billing_code",
        "1 for each rule and the billing code its usage is counted under (join the usage "
        "metrics on billing_code to see them by rule).",
        labels=["rule", "billing_code"],
    )
    for rule, code in sorted(facts.billing_codes.items()):
        rules.add_metric([rule, code], 1)
    yield rules

    yield _gauge(
        "ade_approvals_pending",
        "Approvals and tool calls waiting for an operator's answer, by rule.",
        ["rule"],
        facts.approvals_pending,
    )


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request, services: ServicesDep) -> Response:
    """The cluster's metrics (text format; OpenMetrics when the scraper asks for it)."""
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encoder(ClusterCollector(services)), media_type=content_type)
