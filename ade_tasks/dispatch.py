"""The one dispatch function every trigger path calls: admit, record, then send.

The run row is committed before its message is sent, and the message carries only the run id,
so the database stays the system of record: a send that fails leaves a `queued` run that the
recovery sweep re-sends, never a lost one.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.orm import Session

from ade_tasks.db import rules as rules_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory, autocommit
from ade_tasks.db.schema import RunRow, RunStatus, utcnow
from ade_tasks.errors import AdmissionError, BrokerUnavailableError
from ade_tasks.guardrails import budget_exhausted, rate_limited
from ade_tasks.rules.inputs import resolve_inputs
from ade_tasks.rules.models import (
    OverlapPolicy,
    Rule,
    ScheduleTrigger,
    TriggerType,
    canonical_trigger_type,
)

log = logging.getLogger(__name__)

#: Execution kinds the workers of this version can run; others are refused at admission.
RUNNABLE_KINDS = frozenset({"built-in"})


class TaskSender(Protocol):
    """Sends a run's id to the workers; ade_workers implements it with Celery."""

    def send_run(self, run_id: str, *, queue: str, rule_id: str) -> None:
        """Publish the run; raise BrokerUnavailableError when the broker cannot be reached."""


class InMemorySender:
    """A TaskSender that records what it sent, for unit tests; `down = True` plays broker-down."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.down = False

    def send_run(self, run_id: str, *, queue: str, rule_id: str) -> None:
        if self.down:
            raise BrokerUnavailableError("the in-memory broker is marked down")
        self.sent.append((run_id, queue, rule_id))


@dataclass(frozen=True)
class TriggerEvent:
    """What happened, as every trigger path describes it to dispatch."""

    type: str
    summary: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None

    @classmethod
    def manual(
        cls, inputs: dict[str, Any] | None = None, *, key: str | None = None, by: str = ""
    ) -> TriggerEvent:
        """An operator's manual run."""
        summary = f"manual run by {by}" if by else "manual run"
        return cls(
            TriggerType.MANUAL,
            summary,
            {"inputs": dict(inputs or {}), "requested_by": by},
            f"manual:{key}" if key else None,
        )


@dataclass(frozen=True)
class DispatchResult:
    """The run a trigger produced, whether this call created it, and whether it was sent."""

    run: RunRow
    created: bool
    sent: bool
    send_error: str | None = None


def unrunnable_reason(rule: Rule) -> str | None:
    """Why this version's workers cannot run the rule, or None when they can."""
    if rule.execution.kind in RUNNABLE_KINDS:
        return None
    return (
        f"rule {rule.id!r} uses execution kind {rule.execution.kind!r}, which this version "
        "of ADE Tasks cannot run yet; only built-in actions run today"
    )


def _check_schedule_unchanged(snapshot: rules_db.RuleSnapshot, payload: dict[str, Any]) -> None:
    """A schedule fires only while the rule still has that trigger with the same cron, so an
    edit between a beat's tick and its fire never fires the old schedule."""
    index, cron = payload.get("trigger_index"), payload.get("cron")
    triggers = snapshot.rule.triggers
    current = triggers[index] if isinstance(index, int) and 0 <= index < len(triggers) else None
    if not isinstance(current, ScheduleTrigger) or current.cron != cron:
        raise AdmissionError(
            f"rule {snapshot.id!r} no longer has schedule trigger #{index} with cron {cron!r}; "
            "the schedule was edited or removed after this occurrence was claimed"
        )


def _admit(snapshot: rules_db.RuleSnapshot, kind: str, trigger: TriggerEvent) -> dict[str, Any]:
    """Admission checks; returns the trigger payload to record (manual inputs typed)."""
    unrunnable = unrunnable_reason(snapshot.rule) or snapshot.untrusted_reason()
    if unrunnable:
        raise AdmissionError(unrunnable)
    payload = dict(trigger.payload)
    if kind == TriggerType.SCHEDULE:
        _check_schedule_unchanged(snapshot, payload)
    if kind == TriggerType.MANUAL:
        payload["inputs"] = resolve_inputs(snapshot.rule, payload.get("inputs") or {})
    elif not snapshot.enabled:
        raise AdmissionError(
            f"rule {snapshot.id!r} is disabled, so {kind} triggers do not run it; "
            "enable it in its rule file (enabled: true) or run it manually"
        )
    return payload


def dispatch(
    session_factory: SessionFactory, sender: TaskSender, rule_id: str, trigger: TriggerEvent
) -> DispatchResult:
    """Admit a trigger for a rule, record its run, and send it to the rule's queue.

    Admission: the rule must exist, and if it comes from a shared rules file an admin must have
    trusted that file's content (for manual runs too); automatic triggers need it enabled (a
    manual run is allowed on a disabled rule: the operator asked for it); a schedule fires only
    while the rule still has that schedule. A trigger whose idempotency key was seen before
    returns the existing run and sends nothing. Then the rule's overlap policy decides, for
    every trigger type, whether the run starts, waits in a buffer, is skipped (recorded as
    `skipped` with the reason), or cancels the runs in its way. A trigger beyond the rule's
    `rate_limit` or after its run-seconds budget for the day was used up is skipped too.
    """
    kind = canonical_trigger_type(str(trigger.type))
    key = trigger.idempotency_key or f"{kind}:{uuid.uuid4()}"
    sessions = autocommit(session_factory)
    with sessions.begin() as session:
        snapshot = rules_db.rule_snapshot(session, rule_id)
        try:
            payload = _admit(snapshot, kind, trigger)
        except AdmissionError:
            # A retry of a trigger that was admitted earlier still gets its run back.
            existing = runs_db.get_run_by_key(session, key)
            if existing is None:
                raise
            return DispatchResult(existing, created=False, sent=False)
    guardrails = snapshot.rule.guardrails
    policy = guardrails.overlap_for(kind)
    limit = guardrails.concurrency_limit(policy)
    locked = limit is not None or guardrails.rate_limit is not None
    now = utcnow()
    values: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "rule_id": rule_id,
        "rule_version": snapshot.version,
        "trigger_type": kind,
        "trigger_summary": trigger.summary[:500],
        "trigger": payload,
        "idempotency_key": key,
        "status": RunStatus.QUEUED,
        "billing_code": snapshot.rule.billing_code,
        "usage": {},
        "queue": snapshot.rule.effective_queue,
        "attempt": 0,
        "buffered": False,
        "send_count": 1,
        "sent_at": now,
        "queued_at": now,
        "finished_at": None,
        "error": None,
    }
    if guardrails.budget.run_seconds_per_day is not None:
        with sessions.begin() as session:
            exhausted = budget_exhausted(session, snapshot.rule, None)
        if exhausted:
            _skip(values, exhausted)
    if not locked or values["status"] is RunStatus.SKIPPED:
        # No concurrency or rate limit: one atomic INSERT is the whole transaction, with no
        # BEGIN/COMMIT round trips (see db.engine.autocommit).
        with sessions.begin() as session:
            existing = _insert_or_existing(session, values)
    else:
        with session_factory.begin() as session:
            runs_db.lock_rule(session, rule_id)
            limited = rate_limited(session, snapshot.rule, now)
            if limited:
                _skip(values, limited)
            elif limit is not None:
                _apply_overlap(session, rule_id, policy, limit, values)
            existing = _insert_or_existing(session, values)
    if existing is not None:
        return DispatchResult(existing, created=False, sent=False)
    run = RunRow(**values)
    if run.status != RunStatus.QUEUED or run.buffered:
        return DispatchResult(run, created=True, sent=False)
    try:
        sender.send_run(run.id, queue=run.queue, rule_id=rule_id)
    except BrokerUnavailableError as exc:
        log.warning(
            "run %s is queued but not sent (%s); the recovery sweep will send it", run.id, exc
        )
        return DispatchResult(run, created=True, sent=False, send_error=exc.message)
    return DispatchResult(run, created=True, sent=True)


def _insert_or_existing(session: Session, values: dict[str, Any]) -> RunRow | None:
    """Insert the run; if its idempotency key was seen (a retry, a redelivery, a racing twin),
    return the run that has it instead."""
    if runs_db.insert_run_once(session, values):
        return None
    existing = runs_db.get_run_by_key(session, values["idempotency_key"])
    assert existing is not None
    return existing


def _apply_overlap(
    session: Session, rule_id: str, policy: OverlapPolicy, limit: int, values: dict[str, Any]
) -> None:
    """Decide, under the rule's lock, what the new run does when the rule is busy."""
    active = runs_db.count_active(session, rule_id)
    if active < limit:
        return
    busy = f"{active} run(s) of rule {rule_id!r} are active (limit {limit})"
    if policy is OverlapPolicy.CANCEL_OTHER:
        reason = "cancelled by a newer trigger: the rule's overlap policy is cancel-other"
        cancelled = runs_db.cancel_active(session, rule_id, reason)
        log.info("overlap cancel-other: cancelled %s for a new run of %s", cancelled, rule_id)
        return
    if policy is OverlapPolicy.SKIP:
        _skip(values, f"skipped by the overlap policy skip: {busy}")
    elif policy is OverlapPolicy.BUFFER_ONE and runs_db.has_buffered(session, rule_id):
        _skip(values, f"skipped by the overlap policy buffer-one: {busy} and one is buffered")
    else:  # buffer-one with an empty buffer, buffer-all, allow-all above max_concurrent
        values.update(buffered=True, send_count=0, sent_at=None)


def _skip(values: dict[str, Any], reason: str) -> None:
    values.update(status=RunStatus.SKIPPED, error=reason, finished_at=values["queued_at"])
    values.update(send_count=0, sent_at=None)


def release_buffered(
    session_factory: SessionFactory, sender: TaskSender, rule_id: str, limit: int
) -> list[str]:
    """Start the rule's buffered runs that now have a free slot; returns their ids."""
    with session_factory.begin() as session:
        runs_db.lock_rule(session, rule_id)
        released = runs_db.release_buffered(session, rule_id, limit)
    for run in released:
        try:
            sender.send_run(run.id, queue=run.queue, rule_id=rule_id)
        except BrokerUnavailableError as exc:  # queued and unbuffered: the sweep re-sends it
            log.warning("released run %s not sent yet: %s", run.id, exc)
    return [run.id for run in released]
