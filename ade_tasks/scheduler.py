"""The database-claimed cron scheduler: any number of beats, each occurrence fired once.

Every beat computes the due minute slots of all enabled `schedule` triggers, then claims them in
`schedule_occurrences` (unique per rule, trigger, cron and UTC minute). Only the beat whose INSERT
won a slot dispatches it, with the occurrence as the run's idempotency key, so a claimant that
crashes between claim and dispatch cannot cause two runs: its claim is re-fired by any beat after
`STALE_CLAIM`, and the idempotency key finds the run if it had been created.

Timing rules:
* a slot fires on time when it is at most `LATE_TOLERANCE` old (a slow tick, a beat restart);
* an older slot (all beats were down) fires if it lies within the trigger's `catchup_window`,
  oldest first, and is otherwise recorded as `missed` (at most `MISSED_RECORDED` per trigger);
* a trigger seen for the first time (a new rule, an edited cron) starts at the next slot;
  a known one resumes after its newest claimed slot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select

from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.occurrences import OccurrenceKey
from ade_tasks.db.schema import (
    OccurrenceOutcome,
    RuleRow,
    RunStatus,
    ScheduleOccurrenceRow,
    utcnow,
)
from ade_tasks.dispatch import TaskSender, TriggerEvent, dispatch
from ade_tasks.errors import AdmissionError, NotFoundError
from ade_tasks.rules.models import ScheduleTrigger
from ade_tasks.scheduling import CronCursor, ScheduleSpec

log = logging.getLogger(__name__)

LATE_TOLERANCE = timedelta(minutes=1)
STALE_CLAIM = timedelta(minutes=1)
MISSED_RECORDED = 1000
Clock = Callable[[], datetime]
SpecKey = tuple[str, int, str]


@dataclass
class TickReport:
    """What one tick did."""

    fired: dict[OccurrenceKey, str] = field(default_factory=dict)
    skipped: dict[OccurrenceKey, str] = field(default_factory=dict)
    missed: list[OccurrenceKey] = field(default_factory=list)
    lost: int = 0  # due slots another beat had claimed first


def schedule_specs(session_factory: SessionFactory) -> dict[SpecKey, ScheduleSpec]:
    """The schedule triggers of every enabled rule."""
    table = RuleRow.__table__
    with session_factory() as session:
        rows = session.execute(
            select(table.c.id, table.c.content_hash, table.c.document).where(table.c.enabled)
        ).all()
    specs = {}
    for rule_id, content_hash, document in rows:
        rule = rules_db.parse_document(content_hash, document)
        for index, trigger in enumerate(rule.triggers):
            if isinstance(trigger, ScheduleTrigger):
                spec = ScheduleSpec(
                    rule_id, index, trigger.cron, trigger.timezone, trigger.catchup_window
                )
                specs[(rule_id, index, trigger.cron)] = spec
    return specs


class Scheduler:
    """One beat's view of the schedules; call `tick()` often (every few seconds)."""

    def __init__(
        self,
        session_factory: SessionFactory,
        sender: TaskSender,
        beat_id: str,
        *,
        clock: Clock = utcnow,
        refresh_every: timedelta = timedelta(seconds=5),
    ) -> None:
        self._session_factory = session_factory
        self._sender = sender
        self.beat_id = beat_id
        self._clock = clock
        self._refresh_every = refresh_every
        self._cursors: dict[SpecKey, CronCursor] = {}
        self._refreshed_at: datetime | None = None
        self._stale_checked_at: datetime | None = None

    def now(self) -> datetime:
        """This beat's clock."""
        return self._clock()

    def refresh(self, now: datetime) -> None:
        """Pick up added, edited and removed rules; cursors of unchanged triggers are kept."""
        specs = schedule_specs(self._session_factory)
        new = [key for key in specs if key not in self._cursors]
        resume: dict[SpecKey, datetime] = {}
        if new:
            with self._session_factory() as session:
                resume = occ_db.last_slots(session)
        cursors = {}
        for key, spec in specs.items():
            cursor = self._cursors.get(key)
            if cursor is None or cursor.spec != spec:
                last = resume.get(key)
                start = max(last, now - occ_db.RETENTION) if last else now
                cursor = CronCursor(spec, start)
            cursors[key] = cursor
        self._cursors = cursors
        self._refreshed_at = now

    def tick(self) -> TickReport:
        """Claim and fire every slot due by now; re-fire claims a crashed beat left behind."""
        now = self._clock()
        if self._refreshed_at is None or now - self._refreshed_at >= self._refresh_every:
            self.refresh(now)
        report = TickReport()
        fire: list[OccurrenceKey] = []
        missed: list[OccurrenceKey] = []
        for key, cursor in self._cursors.items():
            overdue: list[OccurrenceKey] = []
            for slot in cursor.due(now):
                occurrence = OccurrenceKey(key[0], key[1], key[2], slot)
                late = now - slot
                window = cursor.spec.catchup_window or timedelta(0)
                if late <= LATE_TOLERANCE or late <= window:
                    fire.append(occurrence)
                else:
                    overdue.append(occurrence)
            missed += overdue[-MISSED_RECORDED:]
        if missed:
            with self._session_factory.begin() as session:
                report.missed = occ_db.claim(
                    session, missed, self.beat_id, OccurrenceOutcome.MISSED
                )
        # Claim and fire batch by batch, each claim committed on its own: beats that tick
        # together then share the work (one fires a batch while the others claim the next)
        # instead of the first claimant owning every slot of the minute.
        # Sorted by rule and trigger, then slot, so a trigger's catch-up fires oldest first.
        ordered = sorted(fire)
        won_total = 0
        for start in range(0, len(ordered), occ_db.CLAIM_BATCH):
            batch = ordered[start : start + occ_db.CLAIM_BATCH]
            with self._session_factory.begin() as session:
                won = occ_db.claim(session, batch, self.beat_id)
            won_total += len(won)
            for occurrence in won:
                self._fire(occurrence, report)
        report.lost = len(fire) + len(missed) - won_total - len(report.missed)
        if self._stale_checked_at is None or now - self._stale_checked_at >= STALE_CLAIM / 2:
            self._stale_checked_at = now
            self._refire_stale_claims(now, report)
        return report

    def _fire(self, key: OccurrenceKey, report: TickReport) -> None:
        trigger = TriggerEvent(
            type="schedule",
            summary=f"schedule {key.cron} at {key.slot:%Y-%m-%d %H:%M} UTC",
            payload={
                "trigger_index": key.trigger_index,
                "cron": key.cron,
                "slot": key.slot.isoformat(),
            },
            idempotency_key=key.idempotency_key,
        )
        run_id: str | None = None
        reason: str | None = None
        try:
            result = dispatch(self._session_factory, self._sender, key.rule_id, trigger)
        except (AdmissionError, NotFoundError) as exc:
            outcome, reason = OccurrenceOutcome.SKIPPED, exc.message
            report.skipped[key] = reason
        else:
            run_id = result.run.id
            if result.run.status == RunStatus.SKIPPED:  # the overlap policy said no
                outcome, reason = OccurrenceOutcome.SKIPPED, result.run.error
                report.skipped[key] = reason or ""
            else:
                outcome = OccurrenceOutcome.FIRED
                report.fired[key] = run_id
        with self._session_factory.begin() as session:
            occ_db.record_outcome(session, key, outcome, run_id=run_id, reason=reason)

    def _refire_stale_claims(self, now: datetime, report: TickReport) -> None:
        with self._session_factory() as session:
            stale = session.scalars(
                select(ScheduleOccurrenceRow)
                .where(
                    ScheduleOccurrenceRow.outcome == OccurrenceOutcome.CLAIMED.value,
                    ScheduleOccurrenceRow.claimed_at < now - STALE_CLAIM,
                )
                .order_by(ScheduleOccurrenceRow.slot)
                .limit(100)
            ).all()
            keys = [OccurrenceKey(r.rule_id, r.trigger_index, r.cron, r.slot) for r in stale]
        for key in keys:
            log.warning("re-firing %s: its claimant did not record an outcome", key)
            self._fire(key, report)
