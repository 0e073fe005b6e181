"""Cancel and retry of a run, as `POST /api/v1/runs/{id}/cancel` and `/retry` and the web page's
buttons both do them: one path, so the checks, the events and the words are the same.

Both are blocking (database, broker); the async edges call them in the thread pool.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from ade_api.http.deps import Services
from ade_api.http.schemas.runs import RunCancelled, RunOut
from ade_tasks.db import rules as rules_db
from ade_tasks.db import run_cancels as run_cancels_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import runs as runs_db
from ade_tasks.runs import concurrency_keys
from ade_tasks.runs.dispatch import release_buffered
from ade_tasks.runs.dispatch_results import DispatchResult
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus

log = logging.getLogger(__name__)


def cancel_run(services: Services, run_id: str, by: str, note: str | None) -> RunCancelled:
    """Cancel a queued, waiting or running run (ConflictError once it finished).

    A queued run is cancelled at once: its message, when a worker takes it, finds it no longer
    queued and does nothing. A running run's worker reads the cancel from the run's row within
    half a second and kills everything the step's command started. The run gets a
    `run.cancelled` event.
    """
    with services.session_factory.begin() as session:
        row, was = run_cancels_db.cancel_run(session, run_id, by, note)
        run = RunOut.of(row)
    if was != RunStatus.RUNNING:  # a running run's worker releases its rule's buffer itself
        _release_buffer(services, run.rule_id, run.id)
    message = {
        RunStatus.RUNNING: "cancelled; its worker stops the running step within a second",
        RunStatus.WAITING: "cancelled; its pending approvals are cancelled too",
    }.get(RunStatus(was), "cancelled before a worker started it")
    return RunCancelled(run=run, was=was, message=message)


def _release_buffer(services: Services, rule_id: str, run_id: str) -> None:
    """Start runs the rule's overlap policy (or concurrency key) buffered, now that a slot (or
    the cancelled run's key) is free (best effort: the recovery sweep releases them otherwise)."""
    try:
        with services.session_factory() as session:
            rule = rules_db.rule_snapshot(session, rule_id).rule
        guardrails = rule.guardrails
        if rule.concurrency is not None:
            concurrency_keys.release(services.session_factory, services.sender, rule, run_id)
        elif guardrails.buffer_limit() is not None:
            release_buffered(services.session_factory, services.sender, rule_id,
                             guardrails.buffer_limit() or 1)  # fmt: skip
    except Exception:  # the cancel stands; the sweep picks the buffer up
        log.exception("releasing the buffer of rule %s after a cancel failed", rule_id)


@dataclass(frozen=True)
class Retried:
    """What a retry made: the dispatch's result and what to tell the caller about it."""

    result: DispatchResult
    message: str


def retry_run(services: Services, run_id: str, by: str, key: str | None) -> Retried:
    """Start a new run of a finished run's rule with the same trigger (type and payload, plus
    `retry_of`), through the same admission and overlap checks as any trigger. `key`: the
    caller's idempotency key (an earlier retry with it is returned, not repeated); without one
    the request's own id, so a lost database connection can be retried safely."""
    with services.session_factory() as session:
        row = runs_db.retry_source(session, run_id)
        summary = f"retry of {run_id} by {by}: {row.trigger_summary}"
        payload = {**row.trigger, "retry_of": run_id}
        payload.pop("forced_by", None)  # forcing past the kill switch is not inherited
        own = f"retry:{run_id}:{key or 'request:' + uuid.uuid4().hex}"
        rule_id, trigger = row.rule_id, TriggerEvent(row.trigger_type, summary[:500], payload, own)
    result = services.dispatch(rule_id, trigger, own_key=key is None)
    if result.created:
        with services.session_factory.begin() as session:
            data = {"retry": result.run.id, "by": by}
            run_events_db.append_event(session, run_id, runs_db.RETRIED_EVENT, data)
    if not result.created:
        message = "a retry with this Idempotency-Key already exists; returning it"
    elif result.run.status == RunStatus.SKIPPED:
        message = result.run.error or "skipped"
    elif result.sent or result.run.buffered:
        message = "queued" if result.sent else "buffered by the rule's overlap policy"
    else:
        message = f"recorded but not sent: {result.send_error}; the recovery sweep sends it"
    return Retried(result, message)
