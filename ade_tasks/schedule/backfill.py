"""Backfill: fire the schedule slots of a past range that were missed or never claimed, each once.

`backfill(...)` walks every cron `schedule` trigger of one rule over `[start, end)` (start
inclusive, end exclusive, so consecutive ranges never share a slot) in the trigger's own time
zone, with the beats' slot math (`ade_tasks.cron.slots`, daylight-saving rules included), and
for each slot:

* **never claimed**: claims it in `schedule_occurrences` (so no beat can fire it too) and fires it;
* **recorded `missed`** (every beat was down beyond the catch-up window): claims it again with a
  conditional update, so of two backfills racing for it one fires it, and fires it;
* **recorded `skipped` before any run existed** (a pause, the kill switch, a disabled rule, a
  failed dispatch): reported, not fired, because each was a decision about that slot; with
  `include_skipped` it is claimed and fired like a missed one;
* **skipped with a run** (the overlap policy, a rate limit, a budget) or **fired**: reported with
  that run, never fired again (the run with the occurrence's idempotency key exists);
* **claimed** but not recorded (a beat is firing it right now): reported; the beats re-fire an
  unrecorded claim after a minute.

Fired slots go through `dispatch_many`, oldest first, with the occurrence's idempotency key
(the one a beat would use), so the rule's overlap policy applies as to any run: under `skip`,
slots after the first are skipped while it runs; under `buffer-all` ("queue") they wait and run
one after another; `buffer-one` keeps one waiting and skips the rest; `cancel-other` leaves only
the newest. The catch-up window does not apply: firing old slots is what a backfill is for.

Refused, with the field: a time without a zone, `start >= end`, an `end` in the future (slots
not yet due belong to the beats), a `start` older than the 35 days occurrences are kept, more
than `MAX_SLOTS` slots (split the range), a rule without cron triggers, an unknown, disabled,
untrusted or paused rule (a paused trigger's slots are reported `paused` and left alone), and,
while `ADE_DISABLE_AUTOMATIONS` is on, every backfill an admin did not force.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import islice

from ade_tasks.clock import utcnow
from ade_tasks.cron.slots import ScheduleError, iter_slots, span
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import pauses as pauses_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.occurrences import OccurrenceKey
from ade_tasks.db.schema import ScheduleOccurrenceRow
from ade_tasks.errors import AdeError, AdmissionError, InvalidInputError
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import ScheduleTrigger
from ade_tasks.runs.dispatch import dispatch_many
from ade_tasks.runs.dispatch_results import DispatchResult
from ade_tasks.runs.senders import RunSender
from ade_tasks.schedule.scheduler import STALE_CLAIM, occurrence_outcome, schedule_event
from ade_tasks.states import OccurrenceOutcome

#: The most slots one backfill fires; a longer range is refused with where to split it.
MAX_SLOTS = 1000
_TICK = timedelta(microseconds=1)


class SlotResult(StrEnum):
    """What a backfill did with one slot (wire values)."""

    FIRED = "fired"  # this backfill created its run (queued, or buffered by the overlap policy)
    SKIPPED = "skipped"  # this backfill dispatched it; the overlap policy or admission said no
    WOULD_FIRE = "would-fire"  # a dry run: it would be claimed and fired
    ALREADY_FIRED = "already-fired"  # fired before, by a beat or an earlier backfill
    ALREADY_SKIPPED = "already-skipped"  # recorded skipped before; not fired again
    IN_PROGRESS = "in-progress"  # claimed by someone who has not recorded what came of it
    PAUSED = "paused"  # its trigger is paused; left unclaimed


@dataclass(frozen=True)
class BackfillRequest:
    """One backfill as an edge asks for it: the rule, `[start, end)`, who, and the options."""

    rule_id: str
    start: datetime
    end: datetime
    by: str
    dry_run: bool = False
    include_skipped: bool = False
    #: The admin who forces it past ADE_DISABLE_AUTOMATIONS ("" when not forced); the edge
    #: checks the role.
    forced_by: str = ""


@dataclass(frozen=True)
class SlotReport:
    """One slot's explanation: which slot, what the backfill did, the run, and why."""

    key: OccurrenceKey
    timezone: str
    result: SlotResult
    detail: str
    run_id: str | None = None
    #: What the occurrence record said before the backfill (None: never claimed).
    was: str | None = None


@dataclass
class BackfillReport:
    """What a backfill did with every slot of its range, oldest first."""

    request: BackfillRequest
    slots: list[SlotReport] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """How many slots came to each result (only results that occurred)."""
        found: dict[str, int] = {}
        for slot in self.slots:
            found[slot.result.value] = found.get(slot.result.value, 0) + 1
        return found

    @property
    def summary(self) -> str:
        """One line: the rule, the range and the count of each result."""
        request = self.request
        counts = ", ".join(f"{n} {result}" for result, n in self.counts().items()) or "nothing"
        dry = " (dry run: nothing was claimed or fired)" if request.dry_run else ""
        return (
            f"backfill of rule {request.rule_id!r} from {request.start.isoformat()} to "
            f"{request.end.isoformat()} (exclusive){dry}: {len(self.slots)} slot(s): {counts}"
        )


def check_range(start: datetime, end: datetime, now: datetime) -> None:
    """Refuse a range a backfill cannot take, naming the field (`from`, `to`) and the fix."""
    for name, value in (("from", start), ("to", end)):
        if value.tzinfo is None:
            raise InvalidInputError(
                f"{name}: {value.isoformat()} has no time zone, so it would mean a different "
                f"moment on every machine; write it with Z or an offset, e.g. "
                f"{value.isoformat()}Z"
            )
    if start >= end:
        raise InvalidInputError(
            f"from: {start.isoformat()} is not before to ({end.isoformat()}); the range is "
            "[from, to), so give a from earlier than to"
        )
    if end > now:
        raise InvalidInputError(
            f"to: {end.isoformat()} is in the future (now: {now.isoformat(timespec='seconds')}); "
            "slots not yet due belong to the beats, which fire them on time; give a to at or "
            "before now"
        )
    oldest = now - occ_db.RETENTION
    if start < oldest:
        raise InvalidInputError(
            f"from: {start.isoformat()} is more than {occ_db.RETENTION.days} days ago; "
            "occurrences older than that are pruned, so a backfill cannot tell whether those "
            f"slots fired; give a from at or after {oldest.isoformat(timespec='minutes')}"
        )


def slots_in_range(rule: Rule, start: datetime, end: datetime) -> list[OccurrenceKey]:
    """The slots of every cron trigger of `rule` in `[start, end)`, oldest first (then by
    trigger). InvalidInputError for a rule without cron triggers, a trigger that cannot be
    evaluated, or more than `MAX_SLOTS` slots (the message says where to split)."""
    crons = [
        (index, trigger)
        for index, trigger in enumerate(rule.triggers)
        if isinstance(trigger, ScheduleTrigger) and trigger.cron is not None
    ]
    if not crons:
        kinds = ", ".join(str(t.type) for t in rule.triggers)
        raise InvalidInputError(
            f"rule {rule.id!r} has no cron schedule trigger (triggers: {kinds}), so it has no "
            "slots to backfill; one-shot triggers (run_at, delay_seconds) fire once as "
            f"scheduled runs; start a manual run instead (`ade-tasks run {rule.id}`)"
        )
    keys: list[OccurrenceKey] = []
    for index, trigger in crons:
        assert trigger.cron is not None
        spec = trigger.spec(rule.id, index)
        try:
            # (after, until] over minutes is [start, end) over instants.
            slots = islice(iter_slots(spec, start - _TICK, end - _TICK), MAX_SLOTS + 1)
            keys += [OccurrenceKey(rule.id, index, trigger.cron, slot) for slot in slots]
        except ScheduleError as exc:
            raise InvalidInputError(f"triggers.{index}: {exc.message}") from None
    keys.sort(key=lambda k: (k.slot, k.trigger_index))
    if len(keys) > MAX_SLOTS:
        split = keys[MAX_SLOTS].slot.isoformat()
        raise InvalidInputError(
            f"from/to: the range holds more than {MAX_SLOTS} slots of rule {rule.id!r}'s "
            f"schedules; a backfill fires at most {MAX_SLOTS}: split it, e.g. from "
            f"{start.isoformat()} to {split}, then from {split} to {end.isoformat()}"
        )
    return keys


def backfill(
    session_factory: SessionFactory,
    sender: RunSender,
    request: BackfillRequest,
    *,
    now: datetime | None = None,
    automations_disabled: bool = False,
) -> BackfillReport:
    """Fire the missed and never-claimed slots of the request's range once each, and explain
    every slot (see the module docstring); a dry run only explains."""
    check_range(request.start, request.end, now or utcnow())
    with session_factory() as session:
        snapshot = rules_db.rule_snapshots(session, [request.rule_id]).get(request.rule_id)
        if snapshot is None:
            raise rules_db.rule_not_found(request.rule_id)
        pauses = pauses_db.pauses_of(session, [request.rule_id]).get(request.rule_id, [])
    _admit(snapshot, pauses, request, automations_disabled)
    keys = slots_in_range(snapshot.rule, request.start, request.end)
    zones = {
        index: trigger.timezone
        for index, trigger in enumerate(snapshot.rule.triggers)
        if isinstance(trigger, ScheduleTrigger)
    }
    paused = {p.trigger_index: p for p in pauses if p.trigger_index is not None}
    found: dict[OccurrenceKey, SlotReport] = {}
    for key in keys:
        if key.trigger_index in paused:
            reason = paused[key.trigger_index].reason
            found[key] = SlotReport(
                key, zones[key.trigger_index], SlotResult.PAUSED, f"not claimed: {reason}"
            )
    open_keys = [key for key in keys if key not in found]
    for start in range(0, len(open_keys), occ_db.CLAIM_BATCH):
        batch = open_keys[start : start + occ_db.CLAIM_BATCH]
        if request.dry_run:
            found.update(_dry_run(session_factory, request, batch, zones))
        else:
            found.update(_claim_and_fire(session_factory, sender, request, batch, zones))
    return BackfillReport(request, [found[key] for key in keys])


def _admit(
    snapshot: rules_db.RuleSnapshot,
    pauses: list[pauses_db.Pause],
    request: BackfillRequest,
    automations_disabled: bool,
) -> None:
    """The refusals of a whole backfill (AdmissionError, 409 at the API)."""
    rule_id = snapshot.id
    if automations_disabled and not request.forced_by:
        raise AdmissionError(
            f"rule {rule_id!r} not backfilled: automations are disabled on this cluster "
            "(ADE_DISABLE_AUTOMATIONS=1), so no trigger creates runs; unset "
            "ADE_DISABLE_AUTOMATIONS and restart the processes, or, as an admin, force the "
            f"backfill (`ade-tasks rules backfill {rule_id} ... --force`, or `force: true`)"
        )
    untrusted = snapshot.untrusted_reason()
    if untrusted:
        raise AdmissionError(untrusted)
    if not snapshot.enabled:
        raise AdmissionError(
            f"rule {rule_id!r} is disabled, and a backfill fires its schedules as the beats "
            f"would; enable it (`ade-tasks rules enable {rule_id}`) and backfill again, or "
            f"start a manual run (`ade-tasks run {rule_id}`)"
        )
    whole = pauses_db.holding(pauses, None)
    if whole is not None:
        raise AdmissionError(f"not backfilled: {whole.reason}, then backfill again")


def _dry_run(
    session_factory: SessionFactory,
    request: BackfillRequest,
    keys: list[OccurrenceKey],
    zones: dict[int, str],
) -> dict[OccurrenceKey, SlotReport]:
    """What a backfill would do with `keys`, from their records alone."""
    with session_factory() as session:
        rows = occ_db.rows_of(session, request.rule_id, keys)
    found = {}
    for key in keys:
        row = rows.get(key)
        zone = zones[key.trigger_index]
        recorded = _recorded(key, zone, row, request.include_skipped)
        if recorded is not None:
            found[key] = recorded
            continue
        was = row.outcome if row is not None else None
        detail = f"would be claimed and fired ({_was(was)}); the overlap policy decides then"
        found[key] = SlotReport(key, zone, SlotResult.WOULD_FIRE, detail, was=was)
    return found


def _claim_and_fire(
    session_factory: SessionFactory,
    sender: RunSender,
    request: BackfillRequest,
    keys: list[OccurrenceKey],
    zones: dict[int, str],
) -> dict[OccurrenceKey, SlotReport]:
    """Claim `keys` (new rows, then missed ones by a conditional update) in one transaction,
    fire what this call won, and explain what it lost from the records.

    A crash between the commit of the claims and the record of their outcomes leaves claims
    that the beats re-fire after `STALE_CLAIM`; the idempotency key finds a run already made.
    """
    claimed_by = f"backfill by {request.by}"
    with session_factory.begin() as session:
        before = occ_db.rows_of(session, request.rule_id, keys)
        # Only slots without a record are inserted, so the beats' `duplicate_claims` keeps
        # counting races, not backfills reading a range again.
        new = set(occ_db.claim(session, [key for key in keys if key not in before], claimed_by))
        again = set(
            occ_db.reclaim(
                session,
                [key for key in keys if key not in new],
                claimed_by,
                skipped_without_run=request.include_skipped,
            )
        )
    won = [key for key in keys if key in new or key in again]
    found = _fire(session_factory, sender, request, won, zones, before)
    lost = [key for key in keys if key not in found]
    if lost:
        with session_factory() as session:
            rows = occ_db.rows_of(session, request.rule_id, lost)
        for key in lost:
            zone = zones[key.trigger_index]
            row = rows.get(key)
            found[key] = _recorded(key, zone, row, request.include_skipped) or SlotReport(
                key, zone, SlotResult.IN_PROGRESS, "claimed by another caller at the same time"
            )
    return found


def _fire(
    session_factory: SessionFactory,
    sender: RunSender,
    request: BackfillRequest,
    keys: list[OccurrenceKey],
    zones: dict[int, str],
    before: dict[OccurrenceKey, ScheduleOccurrenceRow],
) -> dict[OccurrenceKey, SlotReport]:
    """Dispatch the won slots oldest first as one batch and record what came of each."""
    if not keys:
        return {}
    extra: dict[str, object] = {"backfill_by": request.by}
    if request.forced_by:
        extra["forced_by"] = request.forced_by
    requests = [
        (
            key.rule_id,
            schedule_event(
                key,
                summary=f"backfill of schedule {key.cron} at {key.slot:%Y-%m-%d %H:%M} UTC "
                f"by {request.by}",
                extra=extra,
            ),
        )
        for key in keys
    ]
    results = dispatch_many(
        session_factory,
        sender,
        requests,
        automations_disabled=False,  # checked by _admit (an admin may have forced it)
    )
    outcomes = [occurrence_outcome(k, r) for k, r in zip(keys, results, strict=True)]
    with session_factory.begin() as session:
        occ_db.record_outcomes(session, outcomes)
    found = {}
    for key, result in zip(keys, results, strict=True):
        row = before.get(key)
        was = row.outcome if row is not None else None
        found[key] = _fired(key, zones[key.trigger_index], result, was)
    return found


def _fired(
    key: OccurrenceKey, zone: str, result: DispatchResult | AdeError, was: str | None
) -> SlotReport:
    """The explanation of one slot this backfill dispatched."""
    if isinstance(result, AdeError):
        return SlotReport(key, zone, SlotResult.SKIPPED, result.message, was=was)
    run = result.run
    if not result.created:  # its occurrence record was gone, the run was not
        return SlotReport(
            key, zone, SlotResult.ALREADY_FIRED, f"already fired by run {run.id}", run.id, was
        )
    if run.status == "skipped":
        return SlotReport(key, zone, SlotResult.SKIPPED, run.error or "skipped", run.id, was)
    if run.buffered:
        detail = "buffered by the rule's overlap policy: it starts when an active run ends"
    elif result.sent:
        detail = "queued"
    else:
        detail = f"queued, not sent yet ({result.send_error}); the recovery sweep sends it"
    return SlotReport(key, zone, SlotResult.FIRED, f"{detail} ({_was(was)})", run.id, was)


def _recorded(
    key: OccurrenceKey, zone: str, row: ScheduleOccurrenceRow | None, include_skipped: bool
) -> SlotReport | None:
    """The explanation of a slot whose record keeps a backfill from firing it; None when a
    backfill may fire it (never claimed, missed, or skipped without a run when asked)."""
    if row is None or row.outcome == OccurrenceOutcome.MISSED:
        return None
    was = row.outcome
    if row.outcome == OccurrenceOutcome.FIRED:
        detail = f"already fired by run {row.run_id} ({row.claimed_by})"
        return SlotReport(key, zone, SlotResult.ALREADY_FIRED, detail, row.run_id, was)
    if row.outcome == OccurrenceOutcome.SKIPPED:
        if row.run_id is None and include_skipped:
            return None
        if row.run_id is None:
            hint = "pass include_skipped (--include-skipped) to fire slots skipped before any run"
        else:
            hint = f"its run {row.run_id} records the skip; start a manual run to run it now"
        detail = f"skipped before, not fired again: {row.reason}; {hint}"
        return SlotReport(key, zone, SlotResult.ALREADY_SKIPPED, detail, row.run_id, was)
    detail = (
        f"claimed by {row.claimed_by} at {row.claimed_at:%Y-%m-%d %H:%M:%S} UTC, which has not "
        f"recorded what came of it yet; the beats re-fire an unrecorded claim after "
        f"{span(STALE_CLAIM)}"
    )
    return SlotReport(key, zone, SlotResult.IN_PROGRESS, detail, row.run_id, was)


def _was(outcome: str | None) -> str:
    return "never claimed" if outcome is None else f"was {outcome}"
