"""The recovery sweep: no run stays `queued` without a message or `running` without a worker."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.dispatch import TaskSender
from ade_tasks.errors import BrokerUnavailableError

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    """What one sweep did."""

    failed: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)
    unsent: list[str] = field(default_factory=list)


def recover(
    session_factory: SessionFactory, sender: TaskSender, *, requeue_after: timedelta
) -> RecoveryReport:
    """Fail runs whose lease expired ("worker lost") and re-send queued runs nobody claimed.

    A re-sent run that is in fact still in the broker is harmless: the first delivery claims
    it and the second finds it claimed. `requeue_after` bounds how long a queued run may wait
    for a worker before its message is presumed lost.
    """
    report = RecoveryReport()
    with session_factory.begin() as session:
        report.failed = runs_db.fail_expired_leases(session)
    with session_factory.begin() as session:
        runs = runs_db.take_unsent_runs(session, requeue_after)
    for run in runs:
        try:
            sender.send_run(run.id, queue=run.queue, rule_id=run.rule_id)
            report.resent.append(run.id)
        except BrokerUnavailableError as exc:
            log.warning("could not re-send run %s: %s", run.id, exc)
            report.unsent.append(run.id)
    if report.failed or report.resent:
        log.info("recovery: failed %s (worker lost), re-sent %s", report.failed, report.resent)
    return report
