"""Cluster-wide facts for the metrics endpoint: a handful of aggregate queries over the tables.

Everything here is read at scrape time from the system of record, so every API process reports
the same numbers and nothing has to be shared between processes (no multiprocess files, no
counters lost when a process dies). The price is one short read-only transaction per scrape:

- run counts by (rule, status) and the run duration histogram come from `run_rollups` plus the
  runs its watermark has not passed (`ade_tasks.db.run_rollups`): rows per rule, plus the last
  minute or two of runs and the unfinished ones, however long the history;
- the other tables are small or bounded at write time (occurrences, ingress events, hook
  deliveries, usage per day, pending approvals).

On PostgreSQL the transaction carries a `statement_timeout`, so a slow database makes a scrape
fail fast instead of piling up scrapes.

The values are gauges of what the tables hold (rows pruned by retention disappear from them),
except the run counts and the histogram: runs recorded, which pruning does not lower (the histogram
is shaped as Prometheus expects: cumulative buckets, sum, count).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from ade_tasks.db.run_rollups import RUN_DURATION_BUCKETS, RunTally, Tallies, run_tallies
from ade_tasks.db.schema import (
    ApprovalRow,
    HookDeliveryRow,
    IngressEventRow,
    RuleRow,
    RunRow,
    ScheduleOccurrenceRow,
    UsageRow,
)
from ade_tasks.states import ApprovalStatus, RunStatus

#: A scrape's queries together must finish within this (PostgreSQL only).
STATEMENT_TIMEOUT_MS = 5000

#: Statuses of runs that are not finished yet: the queues they wait in are probed for depth.
UNFINISHED = (RunStatus.QUEUED.value, RunStatus.RUNNING.value, RunStatus.WAITING.value)


@dataclass
class DurationHistogram:
    """Finished runs of one rule: cumulative counts per bucket bound, sum and count."""

    buckets: list[tuple[float, int]]  # (upper bound, runs at most that long), ascending
    count: int
    sum_seconds: float


@dataclass
class UsageTotals:
    """What one billing code used, summed over the days the usage table holds."""

    tokens: int
    cost_usd: float
    run_seconds: float


@dataclass
class ClusterFacts:
    """One scrape's worth of aggregates (see the module docstring for what each one counts)."""

    runs: dict[tuple[str, str], int] = field(default_factory=dict)  # (rule, status) -> runs
    durations: dict[str, DurationHistogram] = field(default_factory=dict)  # rule -> histogram
    occurrences: dict[str, int] = field(default_factory=dict)  # outcome -> occurrences
    ingress: dict[tuple[str, str], int] = field(default_factory=dict)  # (source, status)
    hook_deliveries: dict[tuple[str, int], int] = field(default_factory=dict)  # (hook, code)
    usage: dict[str, UsageTotals] = field(default_factory=dict)  # billing code -> totals
    billing_codes: dict[str, str] = field(default_factory=dict)  # rule -> billing code
    approvals_pending: dict[str, int] = field(default_factory=dict)  # rule -> pending
    active_queues: list[str] = field(default_factory=list)  # queues of unfinished runs


def _durations(tallies: Tallies) -> dict[str, DurationHistogram]:
    """One histogram per rule with timed runs, summed over the rule's statuses."""
    per_rule: dict[str, RunTally] = {}
    for (rule_id, _status), tally in tallies.items():
        per_rule.setdefault(rule_id, RunTally()).add(tally)
    return {
        rule_id: DurationHistogram(
            list(zip(RUN_DURATION_BUCKETS, tally.buckets, strict=True)), tally.timed, tally.seconds
        )
        for rule_id, tally in per_rule.items()
        if tally.timed
    }


def _billing_code(rule_id: str, document: Mapping[str, Any] | None) -> str:
    # The same default as the rule model: no billing code means `auto:<rule id>`.
    code = (document or {}).get("billing_code")
    return code if isinstance(code, str) and code else f"auto:{rule_id}"


def _pairs(rows: Sequence[Any]) -> dict[Any, int]:
    return {tuple(row[:-1]) if len(row) > 2 else row[0]: int(row[-1]) for row in rows}


def cluster_facts(session: Session) -> ClusterFacts:
    """Read every aggregate the metrics endpoint exposes, in one read-only transaction."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}"))
    facts = ClusterFacts()
    tallies = run_tallies(session)
    facts.runs = {key: tally.runs for key, tally in tallies.items()}
    facts.durations = _durations(tallies)
    facts.occurrences = _pairs(
        session.execute(
            select(ScheduleOccurrenceRow.outcome, func.count()).group_by(
                ScheduleOccurrenceRow.outcome
            )
        ).all()
    )
    facts.ingress = _pairs(
        session.execute(
            select(IngressEventRow.source, IngressEventRow.status, func.count()).group_by(
                IngressEventRow.source, IngressEventRow.status
            )
        ).all()
    )
    facts.hook_deliveries = _pairs(
        session.execute(
            select(HookDeliveryRow.hook_id, HookDeliveryRow.status_code, func.count()).group_by(
                HookDeliveryRow.hook_id, HookDeliveryRow.status_code
            )
        ).all()
    )
    usage = select(
        UsageRow.billing_code,
        func.sum(UsageRow.tokens),
        func.sum(UsageRow.cost_usd),
        func.sum(UsageRow.run_seconds),
    ).group_by(UsageRow.billing_code)
    facts.usage = {
        code: UsageTotals(int(tokens or 0), float(cost or 0.0), float(seconds or 0.0))
        for code, tokens, cost, seconds in session.execute(usage)
    }
    facts.billing_codes = {
        rule_id: _billing_code(rule_id, document)
        for rule_id, document in session.execute(select(RuleRow.id, RuleRow.document))
    }
    facts.approvals_pending = _pairs(
        session.execute(
            select(RunRow.rule_id, func.count())
            .select_from(ApprovalRow)
            .join(RunRow, RunRow.id == ApprovalRow.run_id)
            .where(ApprovalRow.status == ApprovalStatus.PENDING.value)
            .group_by(RunRow.rule_id)
        ).all()
    )
    facts.active_queues = sorted(
        session.scalars(select(RunRow.queue).where(RunRow.status.in_(UNFINISHED)).distinct()).all()
    )
    return facts
