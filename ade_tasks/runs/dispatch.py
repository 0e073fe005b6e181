"""The one dispatch function every trigger path calls: admit, record, then send.

The run row is committed before its message is sent, and the message carries only the run id,
so the database stays the system of record: a send that fails leaves a `queued` run that the
recovery sweep re-sends, never a lost one.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db import overlap as overlap_db
from ade_tasks.db import pauses as pauses_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db import run_cancels as run_cancels_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.direct import direct_statements
from ade_tasks.db.engine import SessionFactory, autocommit
from ade_tasks.db.retry import repeating
from ade_tasks.db.run_ids import new_run_id
from ade_tasks.db.schema import RunRow
from ade_tasks.errors import AdeError, AdmissionError, BrokerUnavailableError
from ade_tasks.guardrails.guardrail import Admission
from ade_tasks.guardrails.registry import refusal, serialized, unserialized
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.guardrails import OverlapPolicy
from ade_tasks.rules.inputs import resolve_inputs
from ade_tasks.rules.triggers import ScheduleTrigger, TriggerType, canonical_trigger_type
from ade_tasks.runs import concurrency_keys as keys
from ade_tasks.runs.concurrency_keys import skip as _skip
from ade_tasks.runs.dispatch_results import DispatchResult
from ade_tasks.runs.senders import RunSender
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus

log = logging.getLogger(__name__)


def _check_schedule_unchanged(snapshot: rules_db.RuleSnapshot, payload: JsonObject) -> None:
    """A schedule fires only while the rule still has that trigger with the same cron, so an
    edit between a beat's tick and its fire never fires the old schedule."""
    index, cron, once = payload.get("trigger_index"), payload.get("cron"), payload.get("once")
    triggers = snapshot.rule.triggers
    current = triggers[index] if isinstance(index, int) and 0 <= index < len(triggers) else None
    if once is not None:  # a one-shot trigger: the same run_at / delay_seconds
        if not isinstance(current, ScheduleTrigger) or current.once != once:
            raise AdmissionError(
                f"rule {snapshot.id!r} no longer has schedule trigger #{index} with {once}; "
                "the trigger was edited or removed before it fired"
            )
        return
    if not isinstance(current, ScheduleTrigger) or current.cron != cron:
        raise AdmissionError(
            f"rule {snapshot.id!r} no longer has schedule trigger #{index} with cron {cron!r}; "
            "the schedule was edited or removed after this occurrence was claimed"
        )


#: The refusal of every trigger while the cluster's kill switch is on.
AUTOMATIONS_DISABLED = (
    "automations are disabled on this cluster (ADE_DISABLE_AUTOMATIONS=1), so no trigger "
    "creates runs; unset ADE_DISABLE_AUTOMATIONS and restart the processes to resume, or, as "
    "an admin, force one manual run (`ade-tasks run RULE --force`)"
)


def _admit(
    snapshot: rules_db.RuleSnapshot,
    kind: str,
    trigger: TriggerEvent,
    pauses: list[pauses_db.Pause],
    automations_disabled: bool,
) -> JsonObject:
    """Admission checks; returns the trigger payload to record (manual inputs typed)."""
    payload = dict(trigger.payload)
    if automations_disabled and not (kind == TriggerType.MANUAL and payload.get("forced_by")):
        raise AdmissionError(
            f"rule {snapshot.id!r} not run: {AUTOMATIONS_DISABLED}", kind="kill-switch"
        )
    untrusted = snapshot.untrusted_reason()
    if untrusted:
        raise AdmissionError(untrusted, kind="untrusted")
    if kind == TriggerType.SCHEDULE:
        _check_schedule_unchanged(snapshot, payload)
    if kind == TriggerType.MANUAL:
        payload["inputs"] = resolve_inputs(snapshot.rule, payload.get("inputs") or {})
        return payload
    if not snapshot.enabled:
        raise AdmissionError(
            f"rule {snapshot.id!r} is disabled, so {kind} triggers do not run it; "
            "enable it in its rule file (enabled: true) or run it manually",
            kind="disabled",
        )
    indexes = trigger.trigger_indexes
    if kind == TriggerType.SCHEDULE:
        indexes = (payload["trigger_index"],)
    held = pauses_db.holding(pauses, indexes)
    if held is not None:
        raise AdmissionError(held.reason, kind="paused")
    return payload


def dispatch(
    session_factory: SessionFactory,
    sender: RunSender,
    rule_id: str,
    trigger: TriggerEvent,
    *,
    automations_disabled: bool = False,
) -> DispatchResult:
    """Admit a trigger for a rule, record its run, and send it to the rule's queue.

    Admission: the rule must exist, and if it comes from a shared rules file an admin must have
    trusted that file's content (for manual runs too); automatic triggers need it enabled (a
    manual run is allowed on a disabled rule: the operator asked for it); a schedule fires only
    while the rule still has that schedule; a paused rule or trigger refuses with its note
    (`db.pauses`); `automations_disabled` (the cluster's kill switch, `ADE_DISABLE_AUTOMATIONS`,
    which the edges pass in from their settings) refuses every trigger but a manual run an
    admin forced (`TriggerEvent.manual(forced_by=...)`). A trigger whose idempotency key was
    seen before returns the existing run and sends nothing. Then the rule's overlap policy, or
    its concurrency key (`runs.concurrency_keys`; a key that cannot render refuses the
    trigger), decides, for every trigger type, whether the run starts, waits in a buffer, is
    skipped (recorded as `skipped` with the reason), or cancels the runs in its way. A
    trigger beyond the rule's `rate_limit` or after its run-seconds budget for the day was used
    up is skipped too.

    A rule this process has read before costs one statement (`_dispatch_seen`); otherwise,
    and whenever that one cannot decide alone, the trigger goes through `dispatch_many`.
    """
    database = session_factory.kw["bind"].url
    seen = rules_db.seen_snapshot(database, rule_id)
    if seen is not None:
        found = _dispatch_seen(session_factory, sender, seen, trigger, automations_disabled)
        if found is not None:
            return found
        rules_db.forget_snapshot(database, rule_id)
    (result,) = dispatch_many(
        session_factory, sender, [(rule_id, trigger)], automations_disabled=automations_disabled
    )
    if isinstance(result, AdeError):
        raise result
    return result


def _dispatch_seen(
    session_factory: SessionFactory,
    sender: RunSender,
    seen: rules_db.RuleSnapshot,
    trigger: TriggerEvent,
    automations_disabled: bool,
) -> DispatchResult | None:
    """Admit the trigger by the rule as this process last read it, and insert its run with one
    statement that takes effect only while the rule's row still matches that read and (for an
    automatic trigger) the rule has no pause; then send it. None when this path cannot decide
    alone, having written nothing: a refusal (judged on a read that may be stale), a rule that
    needs its lock, a changed or paused rule, or a key seen before. Saves the rule's SELECT
    (and its document's decoding) on every trigger of a rule this process fired before."""
    plan = _plan(seen, seen.id, trigger, [], automations_disabled)
    if not isinstance(plan, _Plan) or plan.needs_lock or seen.content_hash is None:
        return None
    if not _insert_seen(session_factory, plan, seen):
        return None
    run = runs_db.inserted_row(plan.values)
    error = _send(sender, [run])
    return DispatchResult(run, True, run.id in error and not error[run.id], error.get(run.id))


def _insert_seen(session_factory: SessionFactory, plan: _Plan, seen: rules_db.RuleSnapshot) -> bool:
    """The guardrails' verdict that needs no lock (a rate limit, a budget), then the run's one
    statement; False when the statement did not take effect."""
    unpaused = plan.values["trigger_type"] != TriggerType.MANUAL
    direct = direct_statements(session_factory)
    with autocommit(session_factory).begin() as session:
        _check_guardrails(session, [plan])
        if direct is None:  # SQLite: in the transaction of the guardrails' reads, as ever
            return runs_db.insert_run_of_rule(session, plan.values, seen, unpaused=unpaused)
    # PostgreSQL: by the driver (db.direct), once the session gave back the connection a
    # guardrail's read took (they were two autocommit statements anyway), so that a dispatch
    # never holds two of the pool's connections at once.
    return runs_db.insert_run_of_rule(direct, plan.values, seen, unpaused=unpaused)


def dispatch_retrying(
    session_factory: SessionFactory,
    sender: RunSender,
    rule_id: str,
    trigger: TriggerEvent,
    *,
    own_key: bool = False,
    automations_disabled: bool = False,
) -> DispatchResult:
    """`dispatch`, repeated on a fresh connection when its database connection died (a
    restart, a failover, `pg_terminate_backend`), so a blip costs the caller a pause, not an
    error; DatabaseUnavailableError once the database stays away (`db.retry.repeating`).

    The trigger's idempotency key is what makes a repeat safe, so it must have one. The lost
    attempt may have stored its run (an INSERT that took effect although its answer never
    came), so a repeat looks the key up first and returns the run it finds instead of
    dispatching again; the lost attempt never got to send it, so it is sent now when it is
    queued (a second message is harmless: a worker's claim is atomic). `own_key`: the key is
    this call's own (a request id), so a run found holding it is reported as `created`.
    """
    key = trigger.idempotency_key
    if not key:
        raise ValueError("dispatch_retrying needs a trigger with an idempotency key")
    attempts = 0

    def attempt() -> DispatchResult:
        nonlocal attempts
        attempts += 1
        if attempts > 1:
            with autocommit(session_factory).begin() as session:
                found = runs_db.runs_by_keys(session, [key]).get(key)
                session.expunge_all()
            if found is not None:
                errors = _send(sender, [found])  # only if queued and not buffered
                error = errors.get(found.id)
                return DispatchResult(found, own_key, found.id in errors and not error, error)
        return dispatch(
            session_factory, sender, rule_id, trigger, automations_disabled=automations_disabled
        )

    return repeating(attempt, what=f"dispatching a {trigger.type} run of rule {rule_id!r}")


def dispatch_many(
    session_factory: SessionFactory,
    sender: RunSender,
    requests: Sequence[tuple[str, TriggerEvent]],
    *,
    automations_disabled: bool = False,
) -> list[DispatchResult | AdeError]:
    """`dispatch` for many triggers at once, with the same rules, one result per request (the
    error a refused one raised, in place of its result).

    The batch costs a fixed number of statements: one read of the rules, one transaction that
    takes the overlap locks of the rules that need them (in one global order, so batches never
    deadlock), counts their active runs and inserts every run with one multi-row INSERT, then
    the sends. A beat fires a claimed batch of schedule occurrences this way.
    """
    sessions = autocommit(session_factory)
    with sessions.begin() as session:
        snapshots = rules_db.rule_snapshots(session, [rule_id for rule_id, _ in requests])
        automatic = [r for r, t in requests if canonical_trigger_type(str(t.type)) != "manual"]
        pauses = pauses_db.pauses_of(session, automatic)
        plans = [
            _plan(snapshots.get(r), r, t, pauses.get(r, []), automations_disabled)
            for r, t in requests
        ]
        admitted = [plan for plan in plans if isinstance(plan, _Plan)]
        _check_guardrails(session, admitted)
    inserted = _insert(session_factory, admitted)
    # Keys seen before: a retry, a redelivery, a racing twin, or a refused trigger that was
    # admitted earlier (say, before its rule was disabled) get the run that has the key.
    seen = [plan.key for plan in plans if plan.key not in inserted]
    existing: dict[str, RunRow] = {}
    if seen:
        with sessions.begin() as session:
            existing = runs_db.runs_by_keys(session, seen)
            session.expunge_all()
    created = [runs_db.inserted_row(plan.values) for plan in admitted if plan.key in inserted]
    send_errors = _send(sender, created)
    results: list[DispatchResult | AdeError] = []
    runs = iter(created)
    for plan in plans:
        if plan.key in inserted:
            run = next(runs)
            error = send_errors.get(run.id)
            results.append(DispatchResult(run, True, run.id in send_errors and not error, error))
        elif plan.key in existing:
            results.append(DispatchResult(existing[plan.key], created=False, sent=False))
        else:
            assert isinstance(plan, _Refused)
            results.append(plan.error)
    return results


@dataclass
class _Plan:
    """An admitted trigger: the run row to insert and the rule's limits."""

    snapshot: rules_db.RuleSnapshot
    policy: OverlapPolicy
    limit: int | None
    values: JsonObject

    @property
    def key(self) -> str:
        return str(self.values["idempotency_key"])

    @property
    def rule_lock(self) -> bool:
        return self.limit is not None or bool(serialized(self.snapshot.rule))

    @property
    def needs_lock(self) -> bool:
        skipped = self.values["status"] is RunStatus.SKIPPED
        return not skipped and (self.rule_lock or self.values["concurrency_key"] is not None)


@dataclass(frozen=True)
class _Refused:
    key: str
    error: AdeError


def _plan(
    snapshot: rules_db.RuleSnapshot | None,
    rule_id: str,
    trigger: TriggerEvent,
    pauses: list[pauses_db.Pause],
    automations_disabled: bool,
) -> _Plan | _Refused:
    kind = canonical_trigger_type(str(trigger.type))
    key = trigger.idempotency_key or f"{kind}:{uuid.uuid4()}"
    if snapshot is None:
        return _Refused(key, rules_db.rule_not_found(rule_id))
    now = utcnow()
    try:
        payload = _admit(snapshot, kind, trigger, pauses, automations_disabled)
        concurrency_key = keys.run_key(snapshot.rule, payload, now)
    except AdmissionError as exc:
        return _Refused(key, exc)
    guardrails = snapshot.rule.guardrails
    # A rule with a concurrency key has no rule-wide policy: its key decides (concurrency_keys).
    policy = OverlapPolicy.ALLOW_ALL if concurrency_key else guardrails.overlap_for(kind)
    values: JsonObject = {
        "id": new_run_id(now),  # names the month of `queued_at`: its partition (run_ids)
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
        "concurrency_key": concurrency_key,
    }
    return _Plan(snapshot, policy, guardrails.concurrency_limit(policy), values)


def _check_guardrails(session: Session, plans: list[_Plan]) -> None:
    """Skip the runs the guardrails refuse that need no lock to decide (a run-seconds budget
    used up, say): one verdict per rule and batch, before any lock is taken."""
    verdicts: dict[str, str | None] = {}
    now = utcnow()
    for plan in plans:
        rule = plan.snapshot.rule
        if rule.id not in verdicts:
            verdicts[rule.id] = refusal(Admission(session, rule, now), unserialized(rule))
        if verdicts[rule.id]:
            _skip(plan.values, str(verdicts[rule.id]))


def _insert(session_factory: SessionFactory, plans: list[_Plan]) -> set[str]:
    """Insert the runs (after the guardrails and the overlap policy of the rules that need a
    lock had their say); returns the idempotency keys inserted (a seen key inserts nothing)."""
    if not plans:
        return set()
    locked = [plan for plan in plans if plan.needs_lock]
    if not locked:
        # No concurrency limit and no guardrail that counts runs: one atomic INSERT is the
        # whole transaction, with no BEGIN/COMMIT round trips (see db.engine.autocommit).
        with autocommit(session_factory).begin() as session:
            ids = runs_db.insert_runs_once(session, [plan.values for plan in plans])
        return {plan.key for plan in plans if plan.values["id"] in ids}
    with session_factory.begin() as session:
        rule_ids = sorted({plan.snapshot.id for plan in locked})
        names = {n for p in locked for n in keys.lock_names(p.snapshot.id, p.values, p.rule_lock)}
        overlap_db.lock_rules(session, sorted(names))
        active, buffering = overlap_db.occupancy(session, rule_ids)
        now, held = utcnow(), keys.Held()
        for plan in locked:
            rule = plan.snapshot.rule
            limited = refusal(Admission(session, rule, now), serialized(rule))
            if limited:
                _skip(plan.values, limited)
            elif keys.admit(session, rule, plan.values, held, active) and plan.limit is not None:
                _apply_overlap(session, plan, active, buffering)
        ids = runs_db.insert_runs_once(session, [plan.values for plan in plans])
    return {plan.key for plan in plans if plan.values["id"] in ids}


def _send(sender: RunSender, runs: list[RunRow]) -> dict[str, str | None]:
    """Send the runs that start now (not skipped, not buffered): run id -> None when sent, or
    why not when the broker is down (they stay queued: the recovery sweep sends them)."""
    ready = [run for run in runs if run.status == RunStatus.QUEUED and not run.buffered]
    if not ready:
        return {}
    try:
        sender.send_runs([(run.id, run.queue, run.rule_id) for run in ready])
    except BrokerUnavailableError as exc:
        log.warning(
            "%d run(s) queued but not sent (%s); the recovery sweep will send them",
            len(ready),
            exc,
        )
        return {run.id: exc.message for run in ready}
    return {run.id: None for run in ready}


def _apply_overlap(
    session: Session, plan: _Plan, active: dict[str, int], buffering: set[str]
) -> None:
    """Decide, under the rule's lock, what the new run does when the rule is busy; `active`
    and `buffering` are updated as the batch's own runs take slots."""
    rule_id, policy, limit, values = plan.snapshot.id, plan.policy, plan.limit, plan.values
    assert limit is not None
    count = active.get(rule_id, 0)
    if count < limit:
        active[rule_id] = count + 1
        return
    busy = f"{count} run(s) of rule {rule_id!r} are active (limit {limit})"
    if policy is OverlapPolicy.CANCEL_OTHER:
        cancelled = run_cancels_db.cancel_active(
            session, rule_id, "a newer trigger", "the rule's overlap policy is cancel-other"
        )
        log.info("overlap cancel-other: cancelled %s for a new run of %s", cancelled, rule_id)
        active[rule_id] = 1
        return
    if policy is OverlapPolicy.SKIP:
        _skip(values, f"skipped by the overlap policy skip: {busy}")
    elif policy is OverlapPolicy.BUFFER_ONE and rule_id in buffering:
        _skip(values, f"skipped by the overlap policy buffer-one: {busy} and one is buffered")
    else:  # buffer-one with an empty buffer, buffer-all, allow-all above max_concurrent
        values.update(buffered=True, send_count=0, sent_at=None)
        buffering.add(rule_id)


def release_buffered(
    session_factory: SessionFactory, sender: RunSender, rule_id: str, limit: int
) -> list[str]:
    """Start the rule's buffered runs that now have a free slot; returns their ids."""
    with session_factory.begin() as session:
        overlap_db.lock_rule(session, rule_id)
        released = overlap_db.release_buffered(session, rule_id, limit)
    keys.send_released(sender, released)
    return [run.id for run in released]
