"""Operators' answers to runs waiting for a human, called pending inputs: a chain's gate before
a side-effecting step, or an agent's tool call the policy wants approved.

`accept` (or `accept_for_session`) queues the run again and it resumes where it stopped;
`decline` tells the agent no (a gate: the run ends cancelled); `cancel` ends the run. An
input with a deadline (the session's `approval_timeout_min`) is declined by the recovery sweep
when nobody answered in time.
"""

from __future__ import annotations

import logging
from datetime import datetime

from ade_tasks.clock import utcnow
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import ApprovalRow, RunRow
from ade_tasks.errors import BrokerUnavailableError, InvalidInputError
from ade_tasks.runs.senders import RunSender
from ade_tasks.states import Answer, RunStatus

log = logging.getLogger(__name__)

#: Answers that let an agent's call go on (a question needs their text).
ANSWERS_THAT_ACCEPT = (Answer.ACCEPT, Answer.ACCEPT_FOR_SESSION)
TIMEOUT_ANSWERER = "approval-timeout"


def decide_run(
    session_factory: SessionFactory,
    sender: RunSender,
    run_id: str,
    *,
    approve: bool,
    by: str,
    note: str | None = None,
) -> RunRow:
    """Approve (accept) or reject (decline) the run's pending input; returns the run."""
    with session_factory.begin() as session:
        runs_db.get_run(session, run_id)  # 404 for an unknown run
        row = approvals_db.pending_approval(session, run_id)
        answer = Answer.ACCEPT if approve else Answer.DECLINE
        approvals_db.decide(session, row, answer, by, note, utcnow())
    return _resume(session_factory, sender, run_id)


def answer_input(
    session_factory: SessionFactory,
    sender: RunSender,
    input_id: int,
    answer: Answer,
    *,
    by: str,
    note: str | None = None,
) -> tuple[ApprovalRow, RunRow]:
    """Answer one pending input; returns it and its run as they now stand."""
    with session_factory.begin() as session:
        row = approvals_db.pending_input(session, input_id)
        if row.kind == "question" and answer in ANSWERS_THAT_ACCEPT and not (note or "").strip():
            question = (row.arguments or {}).get("question", "")
            raise InvalidInputError(
                f"input {input_id} is the agent's question {str(question)[:200]!r}: answer it "
                f"with text (`ade-tasks inputs answer {input_id} accept --note 'your answer'`, "
                'or {"answer": "accept", "note": "..."}), or decline it'
            )
        approvals_db.decide(session, row, answer, by, note, utcnow())
        session.flush()
        session.expunge(row)
    return row, _resume(session_factory, sender, row.run_id)


def expire_inputs(
    session_factory: SessionFactory, sender: RunSender, now: datetime | None = None
) -> list[str]:
    """Decline the pending inputs whose deadline passed; returns the runs sent on."""
    with session_factory.begin() as session:
        rows = approvals_db.expired_inputs(session, now or utcnow())
        for row in rows:
            waited = row.expires_at - row.requested_at if row.expires_at else None
            note = f"nobody answered within {waited}" if waited else "nobody answered in time"
            approvals_db.decide(session, row, Answer.DECLINE, TIMEOUT_ANSWERER, note, utcnow())
        run_ids = [row.run_id for row in rows]
    for run_id in run_ids:
        _resume(session_factory, sender, run_id)
    if run_ids:
        log.info("declined unanswered tool calls of runs %s", run_ids)
    return run_ids


def _resume(session_factory: SessionFactory, sender: RunSender, run_id: str) -> RunRow:
    """Send a run its answer queued again; the run as it now stands either way."""
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        session.expunge(run)
    if run.status == RunStatus.QUEUED:
        try:
            sender.send_run(run.id, queue=run.queue, rule_id=run.rule_id)
        except BrokerUnavailableError as exc:  # queued: the recovery sweep sends it later
            log.warning("run %s not sent yet: %s", run.id, exc)
    return run
