"""One-shot schedules: runs that fire once, at a time, through the beats' claims.

Two sources, one table (`scheduled_runs`, `ade_tasks.db.one_shots`):

* a rule's `{type: schedule, run_at: ...}` or `{type: schedule, delay_seconds: N}` trigger. The
  beats turn it into one stored scheduled run when they load the rule: `run_at` as written,
  `delay_seconds` counted from when the rule's current version was stored (`rules.updated_at`),
  so syncing an unchanged rule file again never schedules it twice, and an edit that changes
  the trigger replaces a pending run that has not fired yet;
* an operator's scheduled manual run (`POST /api/v1/rules/{id}/runs` with `run_at` or
  `delay_seconds`, `ade-tasks run RULE --at ... | --in 10m`), stored by the request itself.

A beat claims due runs with one UPDATE that only one beat can win per row (PostgreSQL: `FOR
UPDATE SKIP LOCKED`, so three beats share 10,000 runs due in the same second instead of queueing
on each other's locks), then dispatches them with the scheduled run's key as the run's
idempotency key: a claimant that dies between claim and dispatch leaves a claim that any beat
re-fires after the stale-claim bound, and the key finds the run if it had been created. Timing
follows the cron slots: a run fires when it is at most `LATE_TOLERANCE` (1 min) late or within
its catch-up window, and is otherwise recorded `missed`. Overlap and the other guardrails apply
in dispatch, as for every trigger. A pending run can be cancelled until a beat claims it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.cron.slots import grace, span
from ade_tasks.db import one_shots as once_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.one_shots import TriggerOnce
from ade_tasks.db.schema import ScheduledRunRow
from ade_tasks.errors import AdeError, AdmissionError, TransientError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.inputs import resolve_inputs
from ade_tasks.runs.dispatch import dispatch_many
from ade_tasks.runs.dispatch_results import DispatchResult
from ade_tasks.runs.senders import RunSender
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import OneShotStatus

log = logging.getLogger(__name__)


def schedule_manual_run(
    session: Session,
    rule_id: str,
    run_at: datetime,
    *,
    inputs: JsonObject,
    requested_by: str,
    catchup_window: timedelta | None = None,
    key: str | None = None,
) -> tuple[ScheduledRunRow, bool]:
    """Store an operator's scheduled manual run after the checks a run now would meet (the
    rule exists and is trusted, the inputs fit), so a mistake is refused now, not when it
    fires. The API, the CLI (through the API) and the web page all schedule through here.
    Returns the row and whether this call created it (a `key` seen before: the earlier one)."""
    snapshot = rules_db.rule_snapshots(session, [rule_id]).get(rule_id)
    if snapshot is None:
        raise rules_db.rule_not_found(rule_id)
    untrusted = snapshot.untrusted_reason()
    if untrusted:
        raise AdmissionError(untrusted)
    return once_db.schedule_manual(
        session,
        rule_id,
        run_at,
        inputs=resolve_inputs(snapshot.rule, inputs),
        requested_by=requested_by,
        catchup_window=catchup_window,
        key=key,
    )


class OneShotFirer:
    """One beat's part in firing scheduled runs; `Scheduler.tick` calls `tick`."""

    def __init__(
        self,
        session_factory: SessionFactory,
        sender: RunSender,
        beat_id: str,
        stale_after: timedelta,
        automations_disabled: bool = False,
    ) -> None:
        self._session_factory = session_factory
        self._automations_disabled = automations_disabled  # ADE_DISABLE_AUTOMATIONS
        self._sender = sender
        self.beat_id = beat_id
        self._stale_after = stale_after
        self._stored: set[str] = set()  # keys this beat already stored (or saw stored)
        self._stale_checked_at: datetime | None = None

    def store_triggers(self, triggers: Sequence[TriggerOnce]) -> None:
        """Store the one-shot triggers not stored before; a trigger that changed replaces its
        pending scheduled run (cancelled with the reason)."""
        fresh = [t for t in triggers if t.key not in self._stored]
        if not fresh:
            return
        with self._session_factory.begin() as session:
            once_db.store_trigger_runs(session, fresh)
        self._stored.update(t.key for t in fresh)

    def tick(self, now: datetime) -> dict[str, str]:
        """Claim and fire every scheduled run due by `now` (batch by batch, so beats ticking
        together share them); re-fire stale claims. Returns {scheduled run id: outcome}."""
        results: dict[str, str] = {}
        for _ in range(1000):  # bounded: 200,000 due runs per tick at most
            with self._session_factory.begin() as session:
                claimed = once_db.claim_due(session, self.beat_id, now, once_db.CLAIM_BATCH)
            if not claimed:
                break
            self._fire(claimed, now, results)
        real_now = utcnow()
        if (
            self._stale_checked_at is None
            or real_now - self._stale_checked_at >= self._stale_after / 2
        ):
            self._stale_checked_at = real_now
            with self._session_factory.begin() as session:
                stale = once_db.claim_stale(session, self.beat_id, real_now - self._stale_after)
            if stale:
                log.warning(
                    "re-firing %d scheduled runs whose claimant recorded nothing", len(stale)
                )
                self._fire(stale, now, results)
        return results

    def _fire(self, claimed: list[once_db.Claimed], now: datetime, results: dict[str, str]) -> None:
        outcomes: list[once_db.Settled] = []
        due = []
        for item in claimed:
            late = now - item.run_at
            if late > grace(item.catchup_window):
                reason = (
                    f"due at {item.run_at:%Y-%m-%d %H:%M:%S} UTC but no beat could fire it "
                    f"within {span(grace(item.catchup_window))} (were all beats down?)"
                )
                outcomes.append(once_db.Settled(item.id, OneShotStatus.MISSED, None, reason))
            else:
                due.append(item)
        if due:
            outcomes += self._dispatch(due)
        with self._session_factory.begin() as session:
            once_db.settle(session, outcomes)
        results.update({o.id: o.status.value for o in outcomes})

    def _dispatch(self, due: list[once_db.Claimed]) -> list[once_db.Settled]:
        """Dispatch as one batch; a batch that fails goes one by one, so one run that cannot
        be dispatched is recorded `skipped` with the reason. Database errors propagate (the
        claims stay and are re-fired when stale)."""
        try:
            results = dispatch_many(
                self._session_factory,
                self._sender,
                [_request(i) for i in due],
                automations_disabled=self._automations_disabled,
            )
            return [_settled(i, r) for i, r in zip(due, results, strict=True)]
        except Exception as exc:
            if _transient(exc) or len(due) == 1:
                raise
            log.exception("firing %d scheduled runs together failed; one by one", len(due))
        settled = []
        for item in due:
            try:
                settled += self._dispatch([item])
            except Exception as exc:
                if _transient(exc):
                    raise
                reason = f"could not be dispatched: {type(exc).__name__}: {exc}"
                settled.append(once_db.Settled(item.id, OneShotStatus.SKIPPED, None, reason))
        return settled


def _transient(exc: Exception) -> bool:
    return isinstance(exc, DBAPIError | TransientError)


def _request(item: once_db.Claimed) -> tuple[str, TriggerEvent]:
    """The trigger a scheduled run dispatches: its key is the run's idempotency key."""
    when = f"{item.run_at:%Y-%m-%d %H:%M:%S} UTC"
    if item.trigger_index is None:
        by = item.requested_by or "an operator"
        event = TriggerEvent.manual(item.inputs, by=item.requested_by)
        return item.rule_id, TriggerEvent(
            event.type,
            f"manual run scheduled by {by} for {when}",
            {**event.payload, "scheduled_run": item.id, "run_at": item.run_at.isoformat()},
            f"once:{item.key}",
        )
    return item.rule_id, TriggerEvent(
        "schedule",
        f"schedule once at {when}",
        {
            "trigger_index": item.trigger_index,
            "once": item.spec,
            "scheduled_run": item.id,
            "run_at": item.run_at.isoformat(),
        },
        f"once:{item.key}",
    )


def _settled(item: once_db.Claimed, result: DispatchResult | AdeError) -> once_db.Settled:
    if isinstance(result, AdeError):  # not admitted: the rule is gone, disabled or edited
        return once_db.Settled(item.id, OneShotStatus.SKIPPED, None, result.message)
    run = result.run
    if run.status == "skipped":  # the overlap policy (or a guardrail) said no
        return once_db.Settled(item.id, OneShotStatus.SKIPPED, run.id, run.error)
    return once_db.Settled(item.id, OneShotStatus.FIRED, run.id, None)
