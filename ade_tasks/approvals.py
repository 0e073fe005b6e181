"""An operator's decision on a waiting run: approve (it is queued and sent again, resuming
where it stopped) or reject (it ends `cancelled` with the operator's reason)."""

from __future__ import annotations

import logging

from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunRow, utcnow
from ade_tasks.dispatch import TaskSender
from ade_tasks.errors import BrokerUnavailableError

log = logging.getLogger(__name__)


def decide_run(
    session_factory: SessionFactory,
    sender: TaskSender,
    run_id: str,
    *,
    approve: bool,
    by: str,
    note: str | None = None,
) -> RunRow:
    """Approve or reject the run's pending approval; returns the run as it now stands."""
    with session_factory.begin() as session:
        runs_db.get_run(session, run_id)  # 404 for an unknown run
        row = approvals_db.pending_approval(session, run_id)
        approvals_db.decide(session, row, approve, by, note, utcnow())
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        session.expunge(run)
    if approve:
        try:
            sender.send_run(run.id, queue=run.queue, rule_id=run.rule_id)
        except BrokerUnavailableError as exc:  # queued: the recovery sweep sends it later
            log.warning("approved run %s not sent yet: %s", run.id, exc)
    return run
