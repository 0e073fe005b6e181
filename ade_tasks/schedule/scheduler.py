"""The database-claimed cron scheduler: any number of beats, each occurrence fired once.

Every beat computes the due minute slots of all enabled `schedule` triggers, then claims them in
`schedule_occurrences` (unique per rule, trigger, cron and UTC minute). Only the beat whose INSERT
won a slot dispatches it, with the occurrence as the run's idempotency key, so a claimant that
crashes between claim and dispatch cannot cause two runs: its claim is re-fired by any beat after
`STALE_CLAIM`, and the idempotency key finds the run if it had been created. The beats split a
boundary into shards by rule (`ade_tasks.schedule.shards`) and claim a shard with its occurrences
in one transaction, so a beat that finds a shard taken skips its slots after one statement
instead of claiming (and losing) each of them.

Timing rules:
* a slot fires on time when it is at most `LATE_TOLERANCE` old (a slow tick, a beat restart);
* an older slot (all beats were down) fires if it lies within the trigger's `catchup_window`,
  oldest first, and is otherwise recorded as `missed` (at most `MISSED_RECORDED` per trigger);
* a trigger seen for the first time (a new rule, an edited cron) starts at the next slot;
  a known one resumes after its newest claimed slot.

One-shot triggers (`run_at`, `delay_seconds`) and scheduled manual runs are stored as scheduled
runs and fired on the same ticks with the same timing rules (`ade_tasks.schedule.one_shots`).

Start-up and refreshes are incremental (`ade_tasks.schedule.specs`): a beat reads the rules'
triggers only for content hashes it has not seen, and keeps the cursors of unchanged triggers;
triggers of the same cron and zone share one walk of their slots (`slots.CronSeries`), and a
restarted beat reads where every trigger stopped in one statement per batch of triggers. So 3
beats start over 100,000 rules in seconds (docs/performance.md, "The scheduler").

Error boundaries: each trigger of each rule is evaluated on its own. Stored triggers this
version cannot read, or a trigger whose schedule cannot be evaluated (a cron that never fires,
stored before validation refused such crons; a time zone this machine does not know), becomes
that rule's entry in `Scheduler.problems` (logged once) and is left out until its rule changes;
every other trigger keeps firing. A batch of occurrences that fails to fire is retried one
occurrence at a time, so one that cannot be dispatched is recorded `skipped` with the reason
instead of holding back the rest; database errors still stop the tick (the next one retries,
and claims left unfired are re-fired after `STALE_CLAIM`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, OperationalError

from ade_tasks.clock import utcnow
from ade_tasks.cron.slots import LATE_TOLERANCE, CronCursor, ScheduleSpec
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import schedule_shards as shards_db
from ade_tasks.db.engine import SessionFactory, autocommit
from ade_tasks.db.occurrences import OccurrenceKey
from ade_tasks.db.schema import ScheduleOccurrenceRow
from ade_tasks.errors import AdeError, TransientError
from ade_tasks.runs.dispatch import dispatch_many
from ade_tasks.runs.dispatch_results import DispatchResult
from ade_tasks.runs.senders import RunSender
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.schedule import shards
from ade_tasks.schedule.due_queue import DueQueue
from ade_tasks.schedule.one_shots import OneShotFirer
from ade_tasks.schedule.shards import Shard
from ade_tasks.schedule.specs import ProblemKey, ScheduleBook, SpecKey
from ade_tasks.states import OccurrenceOutcome, RunStatus

log = logging.getLogger(__name__)


def simulated_clock(origin: datetime, speed: float, started: datetime | None = None) -> Clock:
    """A clock that starts at `origin` now and runs `speed` times as fast (tests drive real
    beat processes through simulated hours with it; production uses the real clock)."""
    real_start = started or utcnow()

    def now() -> datetime:
        return origin + (utcnow() - real_start) * speed

    return now


STALE_CLAIM = timedelta(minutes=1)
LOCK_TIMEOUT = timedelta(seconds=2)
MISSED_RECORDED = 1000
#: Entries of dropped cursors the due queue may hold beyond twice the live ones before a refresh
#: refiles it (an edit leaves its old cursor filed until that cursor's slot comes).
COMPACT_SLACK = 1024
Clock = Callable[[], datetime]


@dataclass
class TickReport:
    """What one tick did."""

    fired: dict[OccurrenceKey, str] = field(default_factory=dict)
    skipped: dict[OccurrenceKey, str] = field(default_factory=dict)
    missed: list[OccurrenceKey] = field(default_factory=list)
    lost: int = 0  # due slots another beat had claimed first
    once: dict[str, str] = field(default_factory=dict)  # scheduled run id -> what came of it


class Scheduler:
    """One beat's view of the schedules; call `tick()` often (every few seconds)."""

    def __init__(
        self,
        session_factory: SessionFactory,
        sender: RunSender,
        beat_id: str,
        *,
        clock: Clock = utcnow,
        refresh_every: timedelta = timedelta(seconds=5),
        stale_after: timedelta = STALE_CLAIM,
        lock_timeout: timedelta = LOCK_TIMEOUT,
        automations_disabled: bool = False,
    ) -> None:
        self._session_factory = session_factory
        # An outcome is one statement, so it commits on its own: no transaction a beat frozen
        # between its statements could leave open, holding the rows the others claim.
        self._outcomes = autocommit(session_factory)
        # The kill switch: slots are still claimed, and recorded skipped with why, so the
        # occurrences show what did not run.
        self._automations_disabled = automations_disabled
        self._sender = sender
        self.beat_id = beat_id
        self._clock = clock
        self._refresh_every = refresh_every
        self._book = ScheduleBook(session_factory)
        self._cursors: dict[SpecKey, CronCursor] = {}
        self._queue: DueQueue[SpecKey] = DueQueue()  # the cursors above, by their next slot
        self._refreshed_at: datetime | None = None
        self._stale_checked_at: datetime | None = None
        self._stale_after = stale_after
        self._lock_timeout = lock_timeout
        self._backlog_fire: list[OccurrenceKey] = []
        self._backlog_missed: list[OccurrenceKey] = []
        self._failed: dict[SpecKey, tuple[ScheduleSpec, str]] = {}  # left out until edited
        self.problems: dict[ProblemKey, str] = {}
        self._one_shots = OneShotFirer(
            session_factory, sender, beat_id, stale_after, automations_disabled
        )

    def now(self) -> datetime:
        """This beat's clock."""
        return self._clock()

    def refresh(self, now: datetime) -> None:
        """Pick up added, edited and removed rules; cursors of unchanged triggers are kept.

        Incremental: only the rules that changed since the last refresh are looked at (all of
        them on the first), so a refresh over 100,000 unchanged rules is one narrow read."""
        changed = self._book.load()
        self._refreshed_at = now
        if not changed:
            return
        specs = self._book.specs
        # Failures are kept until their trigger changes; cursors of changed or removed
        # triggers go (in memory first, so a failure below leaves no stale cursor behind).
        self._failed = {k: f for k, f in self._failed.items() if specs.get(k) == f[0]}
        for key in [k for k in self._cursors if k[0] in changed]:
            if specs.get(key) != self._cursors[key].spec:
                del self._cursors[key]
        new = [
            key
            for rule_id in changed
            for key in self._book.keys_of(rule_id)
            if key not in self._cursors and key not in self._failed
        ]
        try:
            self._one_shots.store_triggers(self._book.once_of(changed))
            resume: dict[SpecKey, datetime] = {}
            if new:
                with self._session_factory() as session:
                    resume = occ_db.last_slots(session, new)
        except BaseException:
            self._book.forget(changed)  # the next refresh takes these rules again
            raise
        for key in new:
            spec = specs[key]
            last = resume.get(key)
            start = max(last, now - occ_db.RETENTION) if last else now
            try:
                cursor = self._cursors[key] = CronCursor(spec, start)
            except Exception as exc:  # this trigger's problem, not the other rules'
                self._failed[key] = (spec, _reason(exc))
            else:
                self._queue.file(key, cursor)
        if len(self._queue) > 2 * len(self._cursors) + COMPACT_SLACK:
            self._queue.compact(self._cursors)
        problems = dict(self._book.problems)
        for (rule_id, index, _cron), (_spec, reason) in self._failed.items():
            problems[(rule_id, index)] = reason
        self._report_problems(problems)

    def _report_problems(self, problems: dict[ProblemKey, str]) -> None:
        """Keep `problems` as this beat's view; log each one when it appears or goes away."""
        for (rule_id, index), reason in problems.items():
            if self.problems.get((rule_id, index)) != reason:
                where = "" if index is None else f" trigger #{index}"
                log.warning(
                    "rule %s%s is not scheduled: %s (every other schedule still fires)",
                    rule_id,
                    where,
                    reason,
                )
        for rule_id, index in self.problems.keys() - problems.keys():
            log.info("rule %s trigger #%s is scheduled again", rule_id, index)
        self.problems = problems

    def tick(self) -> TickReport:
        """Claim and fire every slot due by now; re-fire claims a crashed beat left behind."""
        now = self._clock()
        if self._refreshed_at is None or now - self._refreshed_at >= self._refresh_every:
            self.refresh(now)
        report = TickReport()
        fire, missed = self._due(now)
        # Slots whose claim waited too long on another beat's locks (say, a beat frozen in the
        # middle of its claim) are retried on the next tick with the class they had when due,
        # so a blocked beat neither loses them nor misfiles them as missed.
        self._backlog_fire += fire
        self._backlog_missed += missed
        missed, self._backlog_missed = self._backlog_missed, []
        if missed:
            won_missed = self._claim(missed, OccurrenceOutcome.MISSED)
            if won_missed is None:
                self._backlog_missed = missed
            else:
                report.missed = won_missed
                report.lost += len(missed) - len(won_missed)
        # Claim and fire shard by shard, each claim committed on its own: beats that tick
        # together then share the work (one fires a shard while the others claim the next)
        # instead of the first claimant owning every slot of the minute, and a beat that finds
        # a shard taken skips its occurrences after that one statement (`schedule.shards`).
        due, self._backlog_fire = self._backlog_fire, []
        for shard in shards.split(due):
            won = self._claim(shard.keys, OccurrenceOutcome.CLAIMED, shard)
            if won is None:
                self._backlog_fire += shard.keys
                continue
            report.lost += len(shard.keys) - len(won)
            self._fire_all(won, report)
        # Staleness is real elapsed time since the claim (claimed_at is the real clock), even
        # when a test drives this beat with a simulated one.
        real_now = utcnow()
        if (
            self._stale_checked_at is None
            or real_now - self._stale_checked_at >= self._stale_after / 2
        ):
            self._stale_checked_at = real_now
            self._refire_stale_claims(real_now, report)
        report.once = self._one_shots.tick(now)
        return report

    def next_slot(self) -> datetime | None:
        """The earliest slot any trigger of this beat fires next (None: no schedules)."""
        return self._queue.next_slot()

    def _due(self, now: datetime) -> tuple[list[OccurrenceKey], list[OccurrenceKey]]:
        """The slots that came due since the last tick: to fire, and to record as missed.
        Only the cursors filed at a slot up to `now` are looked at (`DueQueue`)."""
        fire: list[OccurrenceKey] = []
        missed: list[OccurrenceKey] = []
        for key, cursor in self._queue.pop_due(now, self._cursors):
            try:
                due = cursor.due(now)
            except Exception as exc:  # this trigger's problem: drop it until its rule changes
                del self._cursors[key]
                self._failed[key] = (cursor.spec, _reason(exc))
                self._report_problems({**self.problems, (key[0], key[1]): _reason(exc)})
                continue
            self._queue.file(key, cursor)
            rule_id, index, cron = key
            if now - due[0] <= LATE_TOLERANCE:  # the oldest is on time: all are (the common case)
                fire += [OccurrenceKey(rule_id, index, cron, slot) for slot in due]
                continue
            overdue: list[OccurrenceKey] = []
            window = cursor.spec.catchup_window or timedelta(0)
            for slot in due:
                occurrence = OccurrenceKey(rule_id, index, cron, slot)
                late = now - slot
                if late <= LATE_TOLERANCE or late <= window:
                    fire.append(occurrence)
                else:
                    overdue.append(occurrence)
            missed += overdue[-MISSED_RECORDED:]
        return fire, missed

    def _claim(
        self, keys: list[OccurrenceKey], outcome: OccurrenceOutcome, shard: Shard | None = None
    ) -> list[OccurrenceKey] | None:
        """Claim `keys` (of `shard`, claimed in the same transaction: the shard's loser claims
        nothing); None when another beat's locks held them past the lock timeout."""
        try:
            with self._session_factory.begin() as session:
                occ_db.bound_lock_waits(session, self._lock_timeout)
                if shard is not None and not shards_db.claim_shard(
                    session, shard.slot, shard.shards, shard.shard, shard.digest, self.beat_id
                ):
                    return []
                return occ_db.claim(session, keys, self.beat_id, outcome)
        except OperationalError as exc:
            if not occ_db.is_lock_timeout(exc):
                raise
            log.warning(
                "claiming %d slots waited over %s on another beat's locks; retrying next tick",
                len(keys),
                self._lock_timeout,
            )
            return None

    def _fire_all(self, keys: list[OccurrenceKey], report: TickReport) -> None:
        """Fire the occurrences as one batch; if that fails, one at a time, so one occurrence
        that cannot be dispatched is recorded `skipped` with the reason and the others fire.
        Database errors are raised (the claims stay and are re-fired when stale)."""
        if not keys:
            return
        try:
            self._fire_batch(keys, report)
            return
        except Exception as exc:
            if _transient(exc):
                raise
            log.exception(
                "firing %d occurrences together failed; firing them one by one", len(keys)
            )
        for key in keys:
            try:
                self._fire_batch([key], report)
            except Exception as exc:
                if _transient(exc):
                    raise
                reason = f"could not be dispatched: {_reason(exc)}"
                log.exception("occurrence %s %s", key, reason)
                report.skipped[key] = reason
                with self._outcomes.begin() as session:
                    outcome = occ_db.Outcome(key, OccurrenceOutcome.SKIPPED, None, reason)
                    occ_db.record_outcomes(session, [outcome])

    def _fire_batch(self, keys: list[OccurrenceKey], report: TickReport) -> None:
        """Dispatch the occurrences as one batch, then record what came of them in one
        transaction (a crash in between leaves claims that are re-fired, and their idempotency
        keys find the runs)."""
        requests = [(key.rule_id, schedule_event(key)) for key in keys]
        results = dispatch_many(
            self._session_factory,
            self._sender,
            requests,
            automations_disabled=self._automations_disabled,
        )
        outcomes = [
            _outcome(key, result, report) for key, result in zip(keys, results, strict=True)
        ]
        with self._outcomes.begin() as session:
            occ_db.record_outcomes(session, outcomes)

    def _refire_stale_claims(self, now: datetime, report: TickReport) -> None:
        with self._session_factory() as session:
            stale = session.scalars(
                select(ScheduleOccurrenceRow)
                .where(
                    ScheduleOccurrenceRow.outcome == OccurrenceOutcome.CLAIMED.value,
                    ScheduleOccurrenceRow.claimed_at < now - self._stale_after,
                )
                .order_by(ScheduleOccurrenceRow.slot)
                .limit(100)
            ).all()
            keys = [OccurrenceKey(r.rule_id, r.trigger_index, r.cron, r.slot) for r in stale]
        if keys:
            log.warning("re-firing %d claims whose claimant recorded no outcome", len(keys))
        self._fire_all(keys, report)


def _reason(exc: Exception) -> str:
    """An exception as a problem's text."""
    return exc.message if isinstance(exc, AdeError) else f"{type(exc).__name__}: {exc}"


def _transient(exc: Exception) -> bool:
    """Is this a failure of the database or broker (retried later), not of one occurrence?"""
    return isinstance(exc, DBAPIError | TransientError)


def schedule_event(
    key: OccurrenceKey, *, summary: str = "", extra: dict[str, object] | None = None
) -> TriggerEvent:
    """The trigger of one occurrence; the occurrence is its idempotency key, so a beat and a
    backfill (`ade_tasks.schedule.backfill`) firing the same slot find the same run. `extra` adds
    payload fields (who backfilled it)."""
    return TriggerEvent(
        type="schedule",
        summary=summary or f"schedule {key.cron} at {key.slot:%Y-%m-%d %H:%M} UTC",
        payload={
            "trigger_index": key.trigger_index,
            "cron": key.cron,
            "slot": key.slot.isoformat(),
            **(extra or {}),
        },
        idempotency_key=key.idempotency_key,
    )


def occurrence_outcome(key: OccurrenceKey, result: DispatchResult | AdeError) -> occ_db.Outcome:
    """What came of one occurrence's dispatch, as its row records it."""
    if isinstance(result, AdeError):  # not admitted: the rule is gone, disabled or edited
        return occ_db.Outcome(key, OccurrenceOutcome.SKIPPED, None, result.message)
    run = result.run
    if run.status == RunStatus.SKIPPED:  # the overlap policy (or a guardrail) said no
        return occ_db.Outcome(key, OccurrenceOutcome.SKIPPED, run.id, run.error)
    return occ_db.Outcome(key, OccurrenceOutcome.FIRED, run.id, None)


def _outcome(
    key: OccurrenceKey, result: DispatchResult | AdeError, report: TickReport
) -> occ_db.Outcome:
    """`occurrence_outcome`, noted in this tick's report."""
    outcome = occurrence_outcome(key, result)
    if outcome.outcome == OccurrenceOutcome.FIRED:
        report.fired[key] = outcome.run_id or ""
    else:
        report.skipped[key] = outcome.reason or ""
    return outcome
