"""Query functions for schedule occurrences: claims, outcomes, listing, pruning."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple, cast

from sqlalchemy import Executable, Table, bindparam, delete, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.prepared import BinaryArray
from ade_tasks.db.schema import ScheduleOccurrenceRow
from ade_tasks.states import OccurrenceOutcome

OCCURRENCES = cast(Table, ScheduleOccurrenceRow.__table__)
RETENTION = timedelta(days=35)
#: Slots claimed (and then fired) together. Small enough that beats ticking together share even a
#: modest minute (10,000 due: 20 batches for 3 beats), large enough that a batch's fixed costs
#: (its claim transaction, the rule and pause reads, the overlap locks, the runs' INSERT, one
#: publish pipeline, the outcomes) stay small per slot: at 100,000 rules due, 3 beats, 200 took
#: 42-44 s and 0.57 ms of beat CPU a slot, 500 took 30-36 s and 0.41-0.48 ms, 1,000 33 s
#: (docs/performance.md, "The scheduler").
CLAIM_BATCH = 500
#: How long a claim's transaction may sit between its statements before PostgreSQL ends it.
#: Its row locks are what the other claimants of the same slots wait on, and its statements
#: follow each other within milliseconds, so only a process frozen mid-claim (SIGSTOP, a paused
#: VM) waits this long; without the limit it would hold every other beat's claims of those
#: slots, and so of everything batched with them, until it woke, and then, minutes behind,
#: record as missed the slots the others had been trying to fire.
FROZEN_AFTER = timedelta(seconds=5)


class OccurrenceKey(NamedTuple):
    """What makes an occurrence unique: rule, trigger, cron expression, UTC minute slot.

    A named tuple, not a dataclass: a beat builds and sorts one per due slot (100,000 at a
    boundary of 100,000 rules), and tuples are built and compared in C (a frozen dataclass's
    generated `__lt__` built two tuples per comparison)."""

    rule_id: str
    trigger_index: int
    cron: str
    slot: datetime

    @property
    def idempotency_key(self) -> str:
        """The run's idempotency key: a second dispatch of this occurrence finds the first run."""
        cron = hashlib.sha256(self.cron.encode()).hexdigest()[:12]
        return f"schedule:{self.rule_id}:{self.trigger_index}:{cron}:{self.slot:%Y-%m-%dT%H:%MZ}"


def _insert(session: Session) -> postgresql.Insert | sqlite.Insert:
    name = session.get_bind().dialect.name
    return (postgresql.insert if name == "postgresql" else sqlite.insert)(OCCURRENCES)


def claim(
    session: Session,
    keys: Sequence[OccurrenceKey],
    beat_id: str,
    outcome: OccurrenceOutcome = OccurrenceOutcome.CLAIMED,
) -> list[OccurrenceKey]:
    """Claim occurrences; returns the ones this beat won, sorted.

    Each batch is one INSERT ... ON CONFLICT DO UPDATE that counts a lost claim as a duplicate;
    `duplicate_claims` comes back 0 only for rows the statement inserted, which is how a beat
    learns what it won (portable to SQLite: no xmax trick). Keys go in sorted order, so two beats
    claiming overlapping batches lock rows in the same order and never deadlock. On PostgreSQL a
    batch goes as one array per key column (`unnest`, in the same order; see `db.prepared`),
    on SQLite as a multi-row INSERT.
    """
    now = utcnow()
    ordered = sorted(set(keys))
    won: list[OccurrenceKey] = []
    dialect = session.get_bind().dialect.name
    statement = _claim_statement(dialect)
    for start in range(0, len(ordered), CLAIM_BATCH):
        batch = ordered[start : start + CLAIM_BATCH]
        if dialect == "postgresql":
            params: dict[str, object] | list[dict[str, object]] = {
                "rule_ids": BinaryArray(key.rule_id for key in batch),
                "indexes": BinaryArray(key.trigger_index for key in batch),
                "crons": BinaryArray(key.cron for key in batch),
                "slots": BinaryArray(key.slot for key in batch),
                "claimed_by": beat_id,
                "claimed_at": now,
                "outcome": outcome.value,
            }
        else:
            # One compiled statement for every batch; SQLAlchemy sends each batch as a
            # multi-row INSERT in the rows' (sorted) order ("insertmanyvalues").
            params = [
                {
                    "rule_id": key.rule_id,
                    "trigger_index": key.trigger_index,
                    "cron": key.cron,
                    "slot": key.slot,
                    "claimed_by": beat_id,
                    "claimed_at": now,
                    "outcome": outcome.value,
                    "duplicate_claims": 0,
                }
                for key in batch
            ]
        result = session.execute(statement, params)
        won += [OccurrenceKey(*row[:4]) for row in result if row[4] == 0]
    return sorted(won)


_CLAIM_STATEMENTS: dict[str, Executable] = {}
_KEY_COLUMNS = ("rule_id", "trigger_index", "cron", "slot")
_CLAIM_PG = text(
    "INSERT INTO schedule_occurrences (rule_id, trigger_index, cron, slot, claimed_by, "
    "claimed_at, outcome, duplicate_claims) SELECT k.rule_id, k.trigger_index, k.cron, k.slot, "
    ":claimed_by, CAST(:claimed_at AS timestamptz), :outcome, 0 FROM unnest(CAST(:rule_ids AS "
    "text[]), CAST(:indexes AS int[]), CAST(:crons AS text[]), CAST(:slots AS timestamptz[])) "
    "AS k(rule_id, trigger_index, cron, slot) ON CONFLICT (rule_id, trigger_index, cron, slot) "
    "DO UPDATE SET duplicate_claims = schedule_occurrences.duplicate_claims + 1 "
    f"RETURNING {', '.join(_KEY_COLUMNS)}, duplicate_claims"
).columns(slot=OCCURRENCES.c.slot.type)


def hold(
    session: Session,
    rule_id: str,
    cron: str,
    *,
    slot: datetime,
    every: timedelta,
    until: datetime,
    owner: str,
) -> int:
    """Claim (as skipped) the slots of (`rule_id`, `cron`) after `slot`, `every` apart, that
    start before `until`, so no process takes them: a periodic job's backoff, held for the
    whole cluster. Returns how many this owner got (another may hold some already)."""
    keys = []
    start = slot + every
    while start < until:
        keys.append(OccurrenceKey(rule_id, 0, cron, start))
        start += every
    if not keys:
        return 0
    return len(claim(session, keys, owner, OccurrenceOutcome.SKIPPED))


def _claim_statement(dialect: str) -> Executable:
    if dialect == "postgresql":
        return _CLAIM_PG
    statement = _CLAIM_STATEMENTS.get(dialect)
    if statement is None:
        statement = _CLAIM_STATEMENTS[dialect] = (
            sqlite.insert(OCCURRENCES)
            .on_conflict_do_update(
                index_elements=list(_KEY_COLUMNS),
                set_={"duplicate_claims": OCCURRENCES.c.duplicate_claims + 1},
            )
            .returning(*(OCCURRENCES.c[c] for c in _KEY_COLUMNS), OCCURRENCES.c.duplicate_claims)
        )
    return statement


def bound_lock_waits(session: Session, timeout: timedelta) -> None:
    """Bound the waits of this claim's transaction both ways: it gives up waiting on another
    transaction's row locks after `timeout`, and PostgreSQL ends it (releasing its own locks) if
    its process stops between statements for `FROZEN_AFTER`. PostgreSQL only; SQLite writers
    are serialized by its busy timeout instead."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            _BOUND_LOCK_WAITS,
            {"waits": _milliseconds(timeout), "frozen": _milliseconds(FROZEN_AFTER)},
        )


_BOUND_LOCK_WAITS = text(
    "SELECT set_config('lock_timeout', :waits, true), "
    "set_config('idle_in_transaction_session_timeout', :frozen, true)"
)


def _milliseconds(span: timedelta) -> str:
    return str(int(span.total_seconds() * 1000))


def is_lock_timeout(exc: OperationalError) -> bool:
    """Did the statement give up on a lock (PostgreSQL SQLSTATE 55P03, lock_not_available)?"""
    return getattr(exc.orig, "sqlstate", None) == "55P03"


_RECORD_OUTCOME = text(
    "UPDATE schedule_occurrences SET outcome = :outcome, run_id = :run_id, reason = :reason "
    "WHERE rule_id = :rule_id AND trigger_index = :trigger_index AND cron = :cron "
    "AND slot = :slot"
).bindparams(bindparam("slot", type_=OCCURRENCES.c.slot.type))


@dataclass(frozen=True)
class Outcome:
    """What came of one claimed occurrence."""

    key: OccurrenceKey
    outcome: OccurrenceOutcome
    run_id: str | None = None
    reason: str | None = None


# PostgreSQL records a whole batch's outcomes in one statement over arrays.
_RECORD_OUTCOMES_PG = text(
    "UPDATE schedule_occurrences AS o SET outcome = v.outcome, run_id = v.run_id, "
    "reason = v.reason FROM unnest(CAST(:rule_ids AS text[]), CAST(:indexes AS int[]), "
    "CAST(:crons AS text[]), CAST(:slots AS timestamptz[]), CAST(:outcomes AS text[]), "
    "CAST(:run_ids AS text[]), CAST(:reasons AS text[])) "
    "AS v(rule_id, trigger_index, cron, slot, outcome, run_id, reason) "
    "WHERE o.rule_id = v.rule_id AND o.trigger_index = v.trigger_index AND o.cron = v.cron "
    "AND o.slot = v.slot"
)


def record_outcomes(session: Session, outcomes: Sequence[Outcome]) -> None:
    """Record what came of claimed occurrences (one statement for a whole batch)."""
    if not outcomes:
        return
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            _RECORD_OUTCOMES_PG,
            {
                "rule_ids": BinaryArray(o.key.rule_id for o in outcomes),
                "indexes": BinaryArray(o.key.trigger_index for o in outcomes),
                "crons": BinaryArray(o.key.cron for o in outcomes),
                "slots": BinaryArray(o.key.slot for o in outcomes),
                "outcomes": BinaryArray(o.outcome.value for o in outcomes),
                "run_ids": BinaryArray(o.run_id for o in outcomes),
                "reasons": BinaryArray(o.reason for o in outcomes),
            },
        )
        return
    session.execute(
        _RECORD_OUTCOME,
        [
            {
                "rule_id": o.key.rule_id,
                "trigger_index": o.key.trigger_index,
                "cron": o.key.cron,
                "slot": o.key.slot,
                "outcome": o.outcome.value,
                "run_id": o.run_id,
                "reason": o.reason,
            }
            for o in outcomes
        ],
    )


# PostgreSQL: a whole batch of keys in one statement, one indexed max() per key.
_LAST_SLOTS_PG = text(
    "SELECT k.rule_id, k.trigger_index, k.cron, (SELECT max(o.slot) FROM schedule_occurrences o "
    "WHERE o.rule_id = k.rule_id AND o.trigger_index = k.trigger_index AND o.cron = k.cron) "
    "FROM unnest(CAST(:rule_ids AS text[]), CAST(:indexes AS int[]), CAST(:crons AS text[])) "
    "AS k(rule_id, trigger_index, cron)"
)
LAST_SLOTS_BATCH = 5000


def last_slots(
    session: Session, keys: Sequence[tuple[str, int, str]]
) -> dict[tuple[str, int, str], datetime]:
    """The newest claimed slot of each (rule, trigger, cron): where a restarted beat resumes.

    One indexed max() per key (the unique index leads with the key's columns), so the cost
    grows with the number of triggers, not with the 35 days of occurrences kept for them. On
    PostgreSQL a batch of `LAST_SLOTS_BATCH` keys is one statement (a beat starting over
    100,000 triggers sends 20, not 100,000: 61 s -> about a second).
    """
    found: dict[tuple[str, int, str], datetime] = {}
    if session.get_bind().dialect.name == "postgresql":
        for start in range(0, len(keys), LAST_SLOTS_BATCH):
            batch = keys[start : start + LAST_SLOTS_BATCH]
            params = {
                "rule_ids": BinaryArray(k[0] for k in batch),
                "indexes": BinaryArray(k[1] for k in batch),
                "crons": BinaryArray(k[2] for k in batch),
            }
            for rule_id, trigger_index, cron, slot in session.execute(_LAST_SLOTS_PG, params):
                if slot is not None:
                    found[(rule_id, trigger_index, cron)] = slot
        return found
    newest = select(func.max(OCCURRENCES.c.slot)).where(
        OCCURRENCES.c.rule_id == bindparam("rule_id"),
        OCCURRENCES.c.trigger_index == bindparam("trigger_index"),
        OCCURRENCES.c.cron == bindparam("cron"),
    )
    for rule_id, trigger_index, cron in keys:
        key = {"rule_id": rule_id, "trigger_index": trigger_index, "cron": cron}
        slot = session.execute(newest, key).scalar_one_or_none()
        if slot is not None:
            found[(rule_id, trigger_index, cron)] = slot
    return found


def reclaim(
    session: Session,
    keys: Sequence[OccurrenceKey],
    claimed_by: str,
    *,
    skipped_without_run: bool = False,
) -> list[OccurrenceKey]:
    """Claim again the occurrences recorded `missed` (and, with `skipped_without_run`, those
    `skipped` before any run was created: a pause, the kill switch, a disabled rule); returns
    the ones this call won, sorted.

    Each is one conditional UPDATE, so of two callers racing for a slot the second waits on
    the first's row lock, finds the outcome no longer matches and wins nothing.
    """
    reclaimable = OCCURRENCES.c.outcome == OccurrenceOutcome.MISSED.value
    if skipped_without_run:
        reclaimable = reclaimable | (
            (OCCURRENCES.c.outcome == OccurrenceOutcome.SKIPPED.value)
            & OCCURRENCES.c.run_id.is_(None)
        )
    statement = (
        update(OCCURRENCES)
        .where(
            OCCURRENCES.c.rule_id == bindparam("k_rule_id"),
            OCCURRENCES.c.trigger_index == bindparam("k_trigger_index"),
            OCCURRENCES.c.cron == bindparam("k_cron"),
            OCCURRENCES.c.slot == bindparam("k_slot"),
            reclaimable,
        )
        .values(
            outcome=OccurrenceOutcome.CLAIMED.value,
            claimed_by=claimed_by[:255],
            claimed_at=utcnow(),
            run_id=None,
            reason=None,
        )
    )
    won = []
    for key in sorted(set(keys)):  # one order for every caller: no deadlocks
        params = {
            "k_rule_id": key.rule_id,
            "k_trigger_index": key.trigger_index,
            "k_cron": key.cron,
            "k_slot": key.slot,
        }
        if getattr(session.execute(statement, params), "rowcount", 0) == 1:
            won.append(key)
    return won


def rows_of(
    session: Session, rule_id: str, keys: Sequence[OccurrenceKey]
) -> dict[OccurrenceKey, ScheduleOccurrenceRow]:
    """The stored occurrences of one rule among `keys` (one range read over their slots)."""
    if not keys:
        return {}
    wanted = set(keys)
    rows = session.scalars(
        select(ScheduleOccurrenceRow).where(
            ScheduleOccurrenceRow.rule_id == rule_id,
            ScheduleOccurrenceRow.slot >= min(k.slot for k in keys),
            ScheduleOccurrenceRow.slot <= max(k.slot for k in keys),
        )
    ).all()
    found = {}
    for row in rows:
        key = OccurrenceKey(row.rule_id, row.trigger_index, row.cron, row.slot)
        if key in wanted:
            found[key] = row
    return found


def list_for_rule(
    session: Session, rule_id: str, limit: int = 100
) -> Sequence[ScheduleOccurrenceRow]:
    """A rule's occurrences, newest first."""
    return session.scalars(
        select(ScheduleOccurrenceRow)
        .where(ScheduleOccurrenceRow.rule_id == rule_id)
        .order_by(ScheduleOccurrenceRow.slot.desc(), ScheduleOccurrenceRow.trigger_index)
        .limit(limit)
    ).all()


def prune(session: Session, now: datetime | None = None) -> int:
    """Delete occurrences older than the retention (35 days); returns how many."""
    cutoff = (now or utcnow()) - RETENTION
    result = session.execute(delete(OCCURRENCES).where(OCCURRENCES.c.slot < cutoff))
    return int(getattr(result, "rowcount", 0) or 0)
