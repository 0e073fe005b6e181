"""The recovery sweep: no run stays `queued` without a message or `running` without a worker."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from ade_tasks.db import ingress as ingress_db
from ade_tasks.db import overlap as overlap_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db import run_recovery as run_recovery_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import BrokerUnavailableError, NotFoundError
from ade_tasks.runs import concurrency_keys
from ade_tasks.runs.dispatch import release_buffered
from ade_tasks.runs.senders import TaskSender

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    """What one sweep did."""

    failed: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)
    unsent: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    resent_events: list[int] = field(default_factory=list)


def recover(
    session_factory: SessionFactory, sender: TaskSender, *, requeue_after: timedelta
) -> RecoveryReport:
    """Resume runs whose lease expired (their worker died) and re-send queued runs nobody
    claimed.

    A run whose worker died is queued again and re-sent at once: the next worker continues it
    after its last finished step, a bounded number of times (see
    `run_recovery_db.fail_expired_leases`).

    A re-sent run that is in fact still in the broker is harmless: the first delivery claims
    it and the second finds it claimed. `requeue_after` bounds how long a queued run may wait
    for a worker before its message is presumed lost.
    """
    report = RecoveryReport()
    with session_factory.begin() as session:
        expired = run_recovery_db.fail_expired_leases(session)
    report.failed = expired.failed
    with session_factory.begin() as session:
        runs = run_recovery_db.take_unsent_runs(session, requeue_after)
    # A resumed session that cannot be sent now stays queued: `take_unsent_runs` re-sends it.
    resumed = {run.id for run in expired.resumed}
    for run in [*expired.resumed, *runs]:
        try:
            sender.send_run(run.id, queue=run.queue, rule_id=run.rule_id)
        except BrokerUnavailableError as exc:
            log.warning("could not re-send run %s: %s", run.id, exc)
            report.unsent.append(run.id)
            continue
        (report.resumed if run.id in resumed else report.resent).append(run.id)
    # Buffered runs are normally released by the worker that ends a run of the same rule; a
    # worker that died (or a rule whose limit was raised) leaves them for this sweep.
    with session_factory() as session:
        buffering = overlap_db.rules_with_buffered_runs(session)
        rules = {}
        for rule_id in buffering:
            try:
                rules[rule_id] = rules_db.rule_snapshot(session, rule_id).rule
            except NotFoundError:
                continue
    for rule_id, rule in rules.items():
        if rule.concurrency is not None:  # per key: each key's oldest run once the key is free
            report.released += concurrency_keys.release(session_factory, sender, rule)
            continue
        guardrails = rule.guardrails
        limit = guardrails.buffer_limit() or guardrails.max_concurrent or 1
        report.released += release_buffered(session_factory, sender, rule_id, limit)
    # Ingress events whose message was lost (or never sent: the broker was down).
    with session_factory() as session:
        waiting = ingress_db.unprocessed_events(session, requeue_after)
    for event_id in waiting:
        try:
            sender.send_ingress(event_id)
            report.resent_events.append(event_id)
        except BrokerUnavailableError as exc:
            log.warning("could not re-send ingress event %s: %s", event_id, exc)
            break
    if report.failed or report.resumed or report.resent or report.released or report.resent_events:
        log.info(
            "recovery: failed %s (worker lost), resumed %s (worker lost), re-sent %s, released %s",
            report.failed,
            report.resumed,
            report.resent,
            report.released,
        )
    return report
