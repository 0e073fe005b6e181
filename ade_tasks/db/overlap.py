"""Query functions of the overlap policy: a rule's lock while dispatch decides, how many of its
concurrency slots are taken, and its buffer of runs held back until a slot frees; and the same
per concurrency key (a key's lock, its active runs, its buffered runs released as it frees).

A slot is taken by a run that is running, waiting, or queued and sent (not buffered). Cancelling
the active runs (`cancel-other`) is `ade_tasks.db.run_cancels.cancel_active`.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, func, or_, select, text, update
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.prepared import BinaryArray
from ade_tasks.db.runs import RUNS, get_run
from ade_tasks.db.schema import RunRow
from ade_tasks.states import RunStatus

ACTIVE = (RunStatus.RUNNING, RunStatus.WAITING)


# The rule's concurrency slots in use: running, waiting, or queued and sent (not buffered).
_COUNT_ACTIVE = text(
    "SELECT count(*) FROM runs WHERE rule_id = :rule_id AND (status IN ('running', 'waiting') "
    "OR (status = 'queued' AND NOT buffered))"
)
_LOCK_RULE = text("SELECT pg_advisory_xact_lock(hashtext(:rule_id))")
_LOCK_RULES = text(
    "SELECT count(pg_advisory_xact_lock(k)) FROM "
    "(SELECT DISTINCT hashtext(r) AS k FROM unnest(CAST(:ids AS text[])) AS r ORDER BY k) AS locks"
)


def lock_rule(session: Session, rule_id: str) -> None:
    """Serialize overlap decisions for one rule until the transaction ends.

    PostgreSQL: a transaction-scoped advisory lock on the rule id. SQLite: its transactions
    already take the write lock up front (BEGIN IMMEDIATE), so there is nothing to add.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_LOCK_RULE, {"rule_id": rule_id})


def lock_rules(session: Session, rule_ids: Sequence[str]) -> None:
    """`lock_rule` for many rules in one statement, taking the locks in one global order so
    that two batches locking overlapping rules never deadlock."""
    if len(rule_ids) == 1:
        lock_rule(session, rule_ids[0])
    elif rule_ids and session.get_bind().dialect.name == "postgresql":
        session.execute(_LOCK_RULES, {"ids": BinaryArray(rule_ids)})


def count_active(session: Session, rule_id: str) -> int:
    """How many of the rule's concurrency slots are taken."""
    return int(session.execute(_COUNT_ACTIVE, {"rule_id": rule_id}).scalar_one())


# PostgreSQL: indexed lookups per rule and active status, each an equality on both columns of
# `ix_runs_rule_id_status_queued_at`, in LATERAL joins that cannot be planned as one scan of
# the table. A plain `rule_id IN (...)` lets the planner start from the status index when its
# statistics are stale (a minute boundary adds 100,000 queued runs faster than ANALYZE follows
# them), and then every batch reads every queued run of every rule: quadratic over a boundary
# (at 30,000 rules 15 s of one beat's 40, docs/performance.md "The scheduler"); a `status IN`
# leaves the status out of the index condition, reading each rule's finished runs too.
_OCCUPANCY_PG = text(
    "SELECT r.id, running.n + waiting.n + queued.sent, queued.held > 0 "
    "FROM unnest(CAST(:ids AS text[])) AS r(id), "
    "LATERAL (SELECT count(*) AS n FROM runs WHERE rule_id = r.id AND status = 'running') "
    "AS running, "
    "LATERAL (SELECT count(*) AS n FROM runs WHERE rule_id = r.id AND status = 'waiting') "
    "AS waiting, "
    "LATERAL (SELECT count(*) FILTER (WHERE NOT buffered) AS sent, count(*) FILTER (WHERE "
    "buffered) AS held FROM runs WHERE rule_id = r.id AND status = 'queued') AS queued"
)


def occupancy(session: Session, rule_ids: Sequence[str]) -> tuple[dict[str, int], set[str]]:
    """For many rules at once: how many of each one's concurrency slots are taken (rules with
    none are absent), and which have a run waiting in their overlap buffer."""
    if not rule_ids:
        return {}, set()
    if session.get_bind().dialect.name == "postgresql":
        rows = session.execute(_OCCUPANCY_PG, {"ids": BinaryArray(rule_ids)}).all()
        return {r: int(n) for r, n, _ in rows if n}, {r for r, _, held in rows if held}
    ids = list(rule_ids)
    active = session.execute(
        select(RunRow.rule_id, func.count())
        .where(RunRow.rule_id.in_(ids))
        .where(
            or_(
                RunRow.status.in_(ACTIVE),
                and_(RunRow.status == RunStatus.QUEUED, RunRow.buffered.is_(False)),
            )
        )
        .group_by(RunRow.rule_id)
    )
    buffering = session.scalars(
        select(RunRow.rule_id)
        .where(RunRow.rule_id.in_(ids))
        .where(RunRow.buffered.is_(True), RunRow.status == RunStatus.QUEUED)
        .distinct()
    )
    return {rule_id: int(count) for rule_id, count in active}, set(buffering)


def rules_with_buffered_runs(session: Session) -> list[str]:
    """Rules that have runs waiting in their overlap buffer."""
    return list(
        session.scalars(
            select(RunRow.rule_id)
            .where(RunRow.buffered.is_(True), RunRow.status == RunStatus.QUEUED)
            .distinct()
        )
    )


def release_buffered(session: Session, rule_id: str, limit: int) -> list[RunRow]:
    """Take runs out of the rule's buffer, oldest first, while it has free slots; the caller
    sends them. Call under `lock_rule`."""
    free = limit - count_active(session, rule_id)
    if free <= 0:
        return []
    ids = session.scalars(
        select(RunRow.id)
        .where(RunRow.rule_id == rule_id, RunRow.buffered.is_(True))
        .where(RunRow.status == RunStatus.QUEUED)
        .order_by(RunRow.queued_at, RunRow.id)
        .limit(free)
    ).all()
    if not ids:
        return []
    session.execute(
        update(RUNS)
        .where(RUNS.c.id.in_(ids))
        .values(buffered=False, sent_at=utcnow(), send_count=RUNS.c.send_count + 1)
    )
    session.expire_all()
    return [get_run(session, run_id) for run_id in ids]


# --- concurrency keys: the same, per rule and key (`ade_tasks.runs.concurrency_keys`) ---------


def key_lock(rule_id: str, key: str) -> str:
    """The name `lock_rules` locks to serialize decisions about one key of one rule (hashed in
    the same space as rule ids, so one sorted statement takes rule and key locks together)."""
    return f"{rule_id}\x1f{key}"


def active_of_key(session: Session, rule_id: str, key: str) -> list[tuple[str, str, bool]]:
    """The rule's runs with this key that hold it or wait for it, oldest first: (id, status,
    buffered); a lookup of `ix_runs_rule_id_concurrency_key_status`. Call under its lock."""
    rows = session.execute(
        select(RUNS.c.id, RUNS.c.status, RUNS.c.buffered)
        .where(RUNS.c.rule_id == rule_id, RUNS.c.concurrency_key == key)
        .where(RUNS.c.status.in_([RunStatus.QUEUED, *ACTIVE]))
        .order_by(RUNS.c.queued_at, RUNS.c.id)
    )
    return [(str(run_id), str(status), bool(buffered)) for run_id, status, buffered in rows]


def buffered_keys(session: Session, rule_id: str) -> list[str]:
    """The keys of the rule's runs that wait in its buffer."""
    return list(
        session.scalars(
            select(RUNS.c.concurrency_key)
            .where(RUNS.c.rule_id == rule_id, RUNS.c.concurrency_key.is_not(None))
            .where(RUNS.c.buffered.is_(True), RUNS.c.status == RunStatus.QUEUED)
            .distinct()
        )
    )


def release_keyed(
    session: Session, rule_id: str, keys: Sequence[str], limit: int | None
) -> list[RunRow]:
    """Take out of the buffer the oldest run of each of these keys that no run of the rule
    holds any longer, while the rule has free slots (`limit`, None: no limit); the caller
    sends them. Call under `key_lock` of every key (and `lock_rule` when there is a limit)."""
    if not keys:
        return []
    free = None if limit is None else limit - count_active(session, rule_id)
    if free is not None and free <= 0:
        return []
    holder = RUNS.alias("holder")
    held = (
        select(holder.c.id)
        .where(holder.c.rule_id == rule_id, holder.c.concurrency_key == RUNS.c.concurrency_key)
        .where(
            or_(
                holder.c.status.in_(ACTIVE),
                and_(holder.c.status == RunStatus.QUEUED, holder.c.buffered.is_(False)),
            )
        )
    )
    waiting = session.execute(
        select(RUNS.c.id, RUNS.c.concurrency_key)
        .where(RUNS.c.rule_id == rule_id, RUNS.c.concurrency_key.in_(list(keys)))
        .where(RUNS.c.buffered.is_(True), RUNS.c.status == RunStatus.QUEUED)
        .where(~held.exists())
        .order_by(RUNS.c.queued_at, RUNS.c.id)
    ).all()
    oldest: dict[str, str] = {}
    for run_id, key in waiting:
        oldest.setdefault(key, run_id)
    ids = list(oldest.values())[:free]
    if not ids:
        return []
    session.execute(
        update(RUNS)
        .where(RUNS.c.id.in_(ids))
        .values(buffered=False, sent_at=utcnow(), send_count=RUNS.c.send_count + 1)
    )
    session.expire_all()
    return [get_run(session, run_id) for run_id in ids]
