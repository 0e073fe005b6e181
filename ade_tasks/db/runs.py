"""Query functions for run rows: creating them once per idempotency key, the worker's claim,
lease and outcome, and the few changes made to a finished run.

Every state change is a single conditional statement so that two workers, or a worker and the
recovery sweep, can never both win the same transition; each takes its `WHERE status ...` from
a move of `ade_tasks.states.RUN_MOVES`. Cancelling is `run_cancels`, the overlap policy's
counts and buffer `overlap`, the sweeps `run_recovery`, and what the API and CLI list
`run_views`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial
from typing import Any, cast

from psycopg.errors import UndefinedTable
from sqlalchemy import Boolean, Executable, String, Table, TextClause, delete, select, text, update
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, configure_mappers

from ade_tasks.clock import utcnow
from ade_tasks.db import usage as usage_db
from ade_tasks.db.direct import Direct, Prepared, Statements
from ade_tasks.db.partitions import partition_name
from ade_tasks.db.prepared import column_arrays, prepared, unnest_arrays
from ade_tasks.db.rules import RuleSnapshot
from ade_tasks.db.run_events import append_event
from ade_tasks.db.run_ids import queued_month
from ade_tasks.db.run_steps import STEP_COLUMNS, STEP_UPSERT, STEPS, StepRecord, record_step
from ade_tasks.db.schema import MAX_ERROR, RunRow
from ade_tasks.errors import ConflictError, NotFoundError
from ade_tasks.json_document import JsonObject
from ade_tasks.states import (
    CLAIM,
    FAIL_AFTER_CLEANUP,
    FINAL_STATUSES,
    FINISH,
    RunStatus,
    check_initial,
)

# The hot path uses Core statements on the tables: the ORM unit of work costs more client CPU.
RUNS = cast(Table, RunRow.__table__)


RETRIED_EVENT = "run.retried"
CLEANUP_FAILED_EVENT = "run.cleanup_failed"


def get_run(session: Session, run_id: str) -> RunRow:
    """The run row, or NotFoundError naming the id."""
    row = session.get(RunRow, run_id)
    if row is None:
        raise NotFoundError(f"run {run_id!r} does not exist; list runs with `ade-tasks runs list`")
    return row


RUN_INSERT_COLUMNS = (
    "id", "rule_id", "rule_version", "trigger_type", "trigger_summary", "trigger",
    "idempotency_key", "status", "billing_code", "usage", "queue", "attempt", "buffered",
    "send_count", "sent_at", "queued_at", "finished_at", "error", "concurrency_key",
)  # fmt: skip
#: Insert columns a caller may leave out (a run of a rule without a concurrency key).
_OPTIONAL: JsonObject = {"concurrency_key": None}


def _complete(values: JsonObject) -> JsonObject:
    """`values` with the optional insert columns it left out."""
    return values if "concurrency_key" in values else {**_OPTIONAL, **values}


#: A run whose idempotency key exists is skipped. Without a conflict target: on PostgreSQL the
#: key's uniqueness is `run_keys`' (the partitioned `runs` cannot hold a unique index without
#: `queued_at`, migration 0020), whose trigger skips the row itself; on SQLite the key's unique
#: index is the only one an insert can conflict with (ids are uuid4).
RUN_KEY_CONFLICT = "ON CONFLICT DO NOTHING"
_INSERT_RUN = prepared(
    f"INSERT INTO runs ({', '.join(RUN_INSERT_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in RUN_INSERT_COLUMNS)}) "
    f"{RUN_KEY_CONFLICT} RETURNING id",
    RUNS,
    *RUN_INSERT_COLUMNS,
)


def _insert_of_rule(dialect: Dialect, unpaused: bool) -> TextClause:
    """The run's INSERT, taking effect only while its rule row is still the one admission
    judged (same version, content, enabled flag and trust state) and, for an automatic trigger
    (`unpaused`), while no pause of the rule exists: dispatch's admission read and its durable
    write in one statement and one round trip. PostgreSQL types a SELECT list's parameters as
    text, so there each one is cast to its column's type."""
    if dialect.name == "postgresql":
        values = [f"CAST(:{c} AS {RUNS.c[c].type.compile(dialect=dialect)})"
                  for c in RUN_INSERT_COLUMNS]  # fmt: skip
    else:
        values = [f":{c}" for c in RUN_INSERT_COLUMNS]
    pauses = " AND NOT EXISTS (SELECT 1 FROM rule_pauses WHERE rule_id = :rule_id)"
    return prepared(
        f"INSERT INTO runs ({', '.join(RUN_INSERT_COLUMNS)}) SELECT {', '.join(values)} "
        "FROM rules WHERE id = :rule_id AND version = :rule_version "
        "AND content_hash = :content_hash AND enabled = :enabled AND trust_state = :trust_state"
        f"{pauses if unpaused else ''} {RUN_KEY_CONFLICT} RETURNING id",
        RUNS,
        *RUN_INSERT_COLUMNS,
        content_hash=String(),
        enabled=Boolean(),
        trust_state=String(),
    )


_INSERT_OF_RULE: dict[tuple[str, bool], TextClause] = {}


def insert_run_of_rule(
    session: Statements, values: JsonObject, snapshot: RuleSnapshot, *, unpaused: bool
) -> bool:
    """INSERT the run if its idempotency key is new and its rule row still matches `snapshot`
    (and, with `unpaused`, the rule has no pause); True when this call inserted it. False says
    only that it did not: the key was seen, or the rule changed, was paused or deleted."""
    check_initial(values["id"], values["status"])
    dialect = session.get_bind().dialect
    statement = _INSERT_OF_RULE.get((dialect.name, unpaused))
    if statement is None:
        statement = _INSERT_OF_RULE[dialect.name, unpaused] = _insert_of_rule(dialect, unpaused)
    params = {**_complete(values), "content_hash": snapshot.content_hash,
              "enabled": snapshot.enabled, "trust_state": snapshot.trust_state}  # fmt: skip
    return session.execute(statement, params).scalar_one_or_none() is not None


def _target(table: str) -> str:
    """`runs`, or one of its partitions under the name `runs` (so the statement reads alike)."""
    return "runs" if table == "runs" else f"{table} AS runs"


@lru_cache(maxsize=64)
def _claim(table: str) -> Prepared:
    """The claim, on `runs` or on one month's partition of it (`_first_in_its_partition`)."""
    return prepared(
        f"UPDATE {_target(table)} SET status = 'running', worker = :worker, "
        "lease_expires_at = :lease_expires_at, "
        "started_at = coalesce(started_at, :started_at), attempt = attempt + 1 "
        f"WHERE id = :id AND ({CLAIM.sql_sources()} OR (status = 'running' AND worker = :worker)) "
        "RETURNING id, rule_id, rule_version, trigger, attempt, "
        "(SELECT content_hash FROM rules WHERE rules.id = runs.rule_id) AS rule_hash, "
        "(SELECT trust_state FROM rules WHERE rules.id = runs.rule_id) AS rule_trust",
        RUNS,
        "lease_expires_at",
        "started_at",
    ).columns(trigger=RUNS.c.trigger.type)


_RENEW = prepared(
    "UPDATE runs SET lease_expires_at = :lease_expires_at "
    "WHERE id = :id AND worker = :worker AND status = 'running' RETURNING id",
    RUNS,
    "lease_expires_at",
)


def _finish(table: str) -> str:
    """The run's outcome on `table`. Its parameters are prefixed: in the CTE of
    `_finish_on_postgresql` they share the statement with the step's columns of the same names."""
    return (
        f"UPDATE {_target(table)} SET status = :run_status, error = :run_error, "
        "finished_at = :run_finished_at, queue_status = :queue_status, confidence = :confidence, "
        f"findings = :findings, lease_expires_at = NULL WHERE id = :run_id AND worker = :worker "
        f"AND {FINISH.sql_sources()} RETURNING id"
    )


_FINISH_TYPES = {
    "run_finished_at": RUNS.c.finished_at.type,
    "confidence": RUNS.c.confidence.type,
    "findings": RUNS.c.findings.type,
}
_FINISH_RUN = prepared(_finish("runs"), RUNS, **_FINISH_TYPES)


@lru_cache(maxsize=256)
def _finish_on_postgresql(with_step: bool, with_charge: bool, table: str) -> Prepared:
    """The run's outcome as one PostgreSQL statement of data-modifying CTEs: with the last
    step's record and with the run-seconds charged to its billing code, when given (one round
    trip and one commit where a run used to take three); on `runs` or on one month's partition
    of it (`_first_in_its_partition`)."""
    ctes = []
    if with_step:
        ctes.append(f"last_step AS ({STEP_UPSERT})")
    ctes.append(f"finished AS ({_finish(table)})")
    if with_charge:
        ctes.append(usage_db.CHARGE_CTE)
    columns = STEP_COLUMNS if with_step else ()
    sql = f"WITH {', '.join(ctes)} SELECT id FROM finished"
    return prepared(sql, STEPS, *columns, **_FINISH_TYPES)


#: Partitions this process found missing (a month that has none, its runs held in DEFAULT):
#: their runs are looked up in the parent table from then on.
_MISSING_PARTITIONS: set[str] = set()


def _first_in_its_partition(
    session: Statements, statement: Callable[[str], Prepared], run_id: str, params: JsonObject
) -> Any:
    """The first row `statement` returns for the run, run on the run's own partition when its
    id names its month (`ade_tasks.db.run_ids`), and on `runs` when it does not, when that
    partition does not exist, or when the row is not there.

    A statement on one partition probes one primary key where one on `runs` probes every
    month's: 0.19-0.21 ms of server CPU for a claim against 0.32-0.43 ms with 30 partitions
    (docs/performance.md). Only the direct path aims (PostgreSQL; SQLite has no partitions).
    Running the statement on `runs` after it found nothing on the partition is safe: the first
    changed no run (the claim and the outcome are conditional updates), and the outcome's step
    record is an upsert of the same values."""
    partition = _partition_of(session, run_id)
    if partition is not None:
        try:
            row = session.execute(statement(partition), params).first()
        except DBAPIError as exc:
            if not isinstance(exc.orig, UndefinedTable):
                raise
            _MISSING_PARTITIONS.add(partition)
        else:
            if row is not None:
                return row
    return session.execute(statement("runs"), params).first()


def _partition_of(session: Statements, run_id: str) -> str | None:
    if not isinstance(session, Direct):
        return None
    month = queued_month(run_id)
    if month is None:
        return None
    name = partition_name("runs", month)
    return None if name in _MISSING_PARTITIONS else name


def insert_run_once(session: Session, values: JsonObject) -> bool:
    """INSERT the run unless its idempotency key exists; True when this call inserted it.

    `ON CONFLICT DO NOTHING` keeps two racing dispatches of the same key from failing either one.
    A status outside `INITIAL_STATUSES` is refused (IllegalTransitionError).
    """
    check_initial(values["id"], values["status"])
    return session.execute(_INSERT_RUN, _complete(values)).scalar_one_or_none() is not None


def inserted_row(values: Mapping[str, Any]) -> RunRow:
    """The row of a run just inserted with `values`, as the object its dispatch returns.

    Built without the ORM's attribute events (2 against 25 us through `RunRow(**values)`; a
    beat builds one for each of the 100,000 runs of a boundary). It is transient and never
    added to a session: it only reports what the INSERT wrote."""
    mapper = RunRow.__mapper__
    if not mapper.configured:  # as the first RunRow(...) of a process would
        configure_mappers()
    row: RunRow = mapper.class_manager.new_instance()
    row.__dict__.update(values)
    return row


def insert_runs_once(session: Session, rows: Sequence[JsonObject]) -> set[str]:
    """INSERT many runs, skipping idempotency keys that exist; returns the ids this call
    inserted. One statement: on PostgreSQL the rows go as one array per column (`unnest`, see
    `db.prepared`); on SQLite one compiled statement that SQLAlchemy batches into multi-row
    INSERTs ("insertmanyvalues"). A status outside `INITIAL_STATUSES` is refused before
    anything is written."""
    if len(rows) == 1:
        return {rows[0]["id"]} if insert_run_once(session, rows[0]) else set()
    for row in rows:
        check_initial(row["id"], row["status"])
    rows = [_complete(row) for row in rows]
    dialect = session.get_bind().dialect
    stmt = _INSERT_MANY.get(dialect.name)
    if stmt is None:
        stmt = _INSERT_MANY[dialect.name] = _insert_many(dialect)
    if dialect.name == "postgresql":
        params: Mapping[str, object] | list[dict[str, object]]
        params = column_arrays(RUNS, rows, RUN_INSERT_COLUMNS, dialect)
    else:
        params = [{c: row[c] for c in RUN_INSERT_COLUMNS} for row in rows]
    return {run_id for run_id in session.execute(stmt, params).scalars() if run_id is not None}


_INSERT_MANY: dict[str, Executable] = {}


def _insert_many(dialect: Dialect) -> Executable:
    """The many-runs INSERT of `insert_runs_once` for this dialect."""
    if dialect.name == "postgresql":
        return text(
            f"INSERT INTO runs ({', '.join(RUN_INSERT_COLUMNS)}) "
            f"SELECT * FROM {unnest_arrays(RUNS, RUN_INSERT_COLUMNS, dialect)} "
            f"{RUN_KEY_CONFLICT} RETURNING id"
        )
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    insert = sqlite_insert(RUNS).on_conflict_do_nothing(index_elements=["idempotency_key"])
    return insert.returning(RUNS.c.id)


def runs_by_keys(session: Session, keys: Sequence[str]) -> dict[str, RunRow]:
    """The runs that hold these idempotency keys (one SELECT)."""
    if not keys:
        return {}
    rows = session.scalars(select(RunRow).where(RunRow.idempotency_key.in_(list(keys))))
    return {row.idempotency_key: row for row in rows}


@dataclass(frozen=True)
class ClaimedRun:
    """What a worker needs of the run it just claimed, with its rule's current content hash."""

    id: str
    rule_id: str
    rule_version: int
    trigger: JsonObject
    attempt: int
    rule_hash: str | None
    rule_trust: str | None = None


def claim_run(
    session: Statements, run_id: str, worker: str, lease_until: datetime
) -> ClaimedRun | None:
    """Move a queued run to running under this worker's lease; None if someone else has it.

    A claim repeated by the same worker (its first COMMIT's answer was lost with the
    connection, see `ade_tasks.db.retry`) claims the run again instead of losing it.

    The rule's current content hash comes back in the same statement (None if the rule was
    deleted); workers keep parsed rules by hash, so the document is read only on a miss.
    """
    params = {"id": run_id, "worker": worker, "lease_expires_at": lease_until}
    params["started_at"] = utcnow()
    row = _first_in_its_partition(session, _claim, run_id, params)
    return None if row is None else ClaimedRun(*row)


def renew_lease(session: Session, run_id: str, worker: str, lease_until: datetime) -> bool:
    """Extend a running run's lease; False when the run is no longer this worker's to run."""
    params = {"id": run_id, "worker": worker, "lease_expires_at": lease_until}
    return session.execute(_RENEW, params).scalar_one_or_none() is not None


def is_cancelled(session: Session, run_id: str) -> bool:
    """Was the run cancelled (by an operator, or by overlap `cancel-other`)? Its worker asks
    twice a second, one primary-key read, so a cancel stops the step without waiting for the
    next lease renewal."""
    status = session.execute(select(RUNS.c.status).where(RUNS.c.id == run_id)).scalar()
    return status == RunStatus.CANCELLED


@dataclass(frozen=True)
class RunVerdict:
    """What a finished run amounts to: its review-queue status, confidence and findings."""

    queue_status: str | None = None
    confidence: float | None = None
    findings: list[JsonObject] | None = None


def finish_run(
    session: Statements,
    run_id: str,
    worker: str,
    status: RunStatus,
    error: str | None = None,
    last_step: StepRecord | None = None,
    verdict: RunVerdict | None = None,
    charge: usage_db.Charge | None = None,
) -> bool:
    """Record a running run's outcome (and its last step's, and the run-seconds it charges to
    its billing code); False if it was not `worker`'s (then nothing is charged).

    On PostgreSQL all of it is one statement; SQLite takes up to three, and a crash between them
    leaves a running run for the recovery sweep.
    """
    FINISH.check(RunStatus.RUNNING, status)
    verdict = verdict or RunVerdict()
    params: JsonObject = {
        "run_id": run_id,
        "worker": worker,
        "run_status": status.value,
        "run_error": error[:MAX_ERROR] if error else error,
        "run_finished_at": utcnow(),
        "queue_status": verdict.queue_status,
        "confidence": verdict.confidence,
        "findings": verdict.findings,
    }
    if last_step is not None:
        params.update(last_step.values())
    if charge is not None:
        params.update(vars(charge))
    if session.get_bind().dialect.name == "postgresql":
        statement = partial(_finish_on_postgresql, last_step is not None, charge is not None)
        return _first_in_its_partition(session, statement, run_id, params) is not None
    assert isinstance(session, Session)  # the direct path is PostgreSQL's alone
    if last_step is not None:
        record_step(session, last_step)
    if session.execute(_FINISH_RUN, params).scalar_one_or_none() is None:
        return False
    if charge is not None:
        usage_db.add_usage(session, charge.billing_code, charge.day, run_seconds=charge.run_seconds)
    return True


# --- changes to a finished run -----------------------------------------------------------------


def fail_after_cleanup(session: Session, run_id: str, error: str) -> bool:
    """A deferred cleanup of the run failed: a `succeeded` run becomes `failed` with the
    cleanup's error (the one transition out of a final status: the run's work was not done
    after all); a run that had failed, was cancelled or timed out keeps its own outcome and
    error. Either way the transcript records it. True when the run's status changed."""
    changed = session.execute(
        update(RUNS)
        .where(RUNS.c.id == run_id, RUNS.c.status.in_(FAIL_AFTER_CLEANUP.sources))
        .values(status=RunStatus.FAILED, error=error[:MAX_ERROR])
        .returning(RUNS.c.id)
    ).scalar_one_or_none()
    if changed is not None or session.get(RunRow, run_id) is not None:
        append_event(session, run_id, CLEANUP_FAILED_EVENT, {"error": error[:MAX_ERROR]})
    return changed is not None


def retry_source(session: Session, run_id: str) -> RunRow:
    """The finished run to retry; ConflictError while it is still active."""
    row = get_run(session, run_id)
    if row.status not in FINAL_STATUSES:
        raise ConflictError(
            f"run {run_id} is still {row.status}; only a finished run can be retried "
            f"(cancel it first with `ade-tasks runs cancel {run_id}`)"
        )
    return row


def move_in_review_queue(session: Session, run_id: str, queue_status: str) -> RunRow:
    """Set a finished run's review-queue status (an operator's ignore/archive/approve)."""
    row = get_run(session, run_id)
    if row.queue_status is None:
        raise ConflictError(
            f"run {run_id!r} is not in the review queue (status {row.status}); only finished "
            "runs that did work are reviewed"
        )
    row.queue_status = queue_status
    return row


def prune_finished(session: Session, cutoff: datetime) -> int:
    """Delete the runs that finished before `cutoff` (the retention of a history that is not
    partitioned; a partitioned one drops whole months); returns how many."""
    result = session.execute(delete(RunRow).where(RunRow.finished_at < cutoff))
    return int(getattr(result, "rowcount", 0) or 0)
