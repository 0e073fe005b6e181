"""Query functions for runs, their steps and their events.

Every state change is a single conditional statement so that two workers, or a worker and the
recovery sweep, can never both win the same transition.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, TextClause, and_, bindparam, func, insert, or_, select, text, update
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db import usage as usage_db
from ade_tasks.db.schema import ApprovalRow, RuleRow, RunEventRow, RunRow, RunStepRow
from ade_tasks.errors import (
    ConflictError,
    IllegalTransitionError,
    InvalidInputError,
    NotFoundError,
)
from ade_tasks.states import (
    CANCEL,
    CLAIM,
    FAIL_AFTER_CLEANUP,
    FAIL_LOST,
    FINAL_STATUSES,
    FINISH,
    RESUME_LOST,
    ApprovalStatus,
    RunStatus,
    StepStatus,
)

# The hot path uses Core statements on the tables: the ORM unit of work costs more client CPU.
RUNS = cast(Table, RunRow.__table__)
STEPS = cast(Table, RunStepRow.__table__)
EVENTS = cast(Table, RunEventRow.__table__)
RULES = cast(Table, RuleRow.__table__)

MAX_PAGE = 500
MAX_ERROR = 4000
DEFAULT_PAGE = 100


def get_run(session: Session, run_id: str) -> RunRow:
    """The run row, or NotFoundError naming the id."""
    row = session.get(RunRow, run_id)
    if row is None:
        raise NotFoundError(f"run {run_id!r} does not exist; list runs with `ade-tasks runs list`")
    return row


def get_run_by_key(session: Session, idempotency_key: str) -> RunRow | None:
    """The run created for this idempotency key, if any."""
    return session.scalars(select(RunRow).where(RunRow.idempotency_key == idempotency_key)).first()


# --- the run path's state changes ------------------------------------------------------------
# Prepared SQL text with typed parameters: the same statements built with the SQL expression
# language cost about 0.6 ms more client CPU each (building, then cache-keying every call), and a
# run makes three to four of them. The SQL is portable between PostgreSQL and SQLite (>= 3.35).


def _sql(sql: str, table: Table, *columns: str, **types: Any) -> TextClause:
    """A text statement whose parameters named like `table`'s columns get those columns' types."""
    params = [bindparam(c, type_=table.c[c].type) for c in columns]
    params += [bindparam(name, type_=type_) for name, type_ in types.items()]
    return text(sql).bindparams(*params)


RUN_INSERT_COLUMNS = (
    "id", "rule_id", "rule_version", "trigger_type", "trigger_summary", "trigger",
    "idempotency_key", "status", "billing_code", "usage", "queue", "attempt", "buffered",
    "send_count", "sent_at", "queued_at", "finished_at", "error",
)  # fmt: skip
_INSERT_RUN = _sql(
    f"INSERT INTO runs ({', '.join(RUN_INSERT_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in RUN_INSERT_COLUMNS)}) "
    "ON CONFLICT (idempotency_key) DO NOTHING RETURNING id",
    RUNS,
    *RUN_INSERT_COLUMNS,
)
_CLAIM = _sql(
    "UPDATE runs SET status = 'running', worker = :worker, lease_expires_at = :lease_expires_at, "
    "started_at = coalesce(started_at, :started_at), attempt = attempt + 1 "
    f"WHERE id = :id AND ({CLAIM.sql_sources()} OR (status = 'running' AND worker = :worker)) "
    "RETURNING id, rule_id, rule_version, trigger, attempt, "
    "(SELECT content_hash FROM rules WHERE rules.id = runs.rule_id) AS rule_hash, "
    "(SELECT trust_state FROM rules WHERE rules.id = runs.rule_id) AS rule_trust",
    RUNS,
    "lease_expires_at",
    "started_at",
).columns(trigger=RUNS.c.trigger.type)
_RENEW = _sql(
    "UPDATE runs SET lease_expires_at = :lease_expires_at "
    "WHERE id = :id AND worker = :worker AND status = 'running' RETURNING id",
    RUNS,
    "lease_expires_at",
)
# Parameters of the run's outcome are prefixed: in the CTE below they share the statement with
# the step's columns of the same names.
_FINISH = (
    "UPDATE runs SET status = :run_status, error = :run_error, finished_at = :run_finished_at, "
    "queue_status = :queue_status, confidence = :confidence, findings = :findings, "
    f"lease_expires_at = NULL WHERE id = :run_id AND worker = :worker AND {FINISH.sql_sources()} "
    "RETURNING id"
)
_FINISH_TYPES = {
    "run_finished_at": RUNS.c.finished_at.type,
    "confidence": RUNS.c.confidence.type,
    "findings": RUNS.c.findings.type,
}
STEP_COLUMNS = (
    "run_id", "index", "step_id", "action_type", "started_at", "status", "finished_at",
    "exit_code", "output", "result", "error",
)  # fmt: skip
_QUOTED_STEP_COLUMNS = ", ".join(f'"{c}"' for c in STEP_COLUMNS)  # "index" is a keyword
_STEP_INSERT = (
    f"INSERT INTO run_steps ({_QUOTED_STEP_COLUMNS}) "
    f'VALUES ({", ".join(":" + c for c in STEP_COLUMNS)}) ON CONFLICT (run_id, "index") '
)
_STEP_OUTCOME = ", ".join(
    f"{c} = excluded.{c}" for c in STEP_COLUMNS if c not in ("run_id", "index", "started_at")
)
# A step is shown running only while its run is: a run cancelled (or recovered) between the
# step's start and this announcement must not keep a `running` step forever.
_ANNOUNCE_STEP = _sql(
    f"INSERT INTO run_steps ({_QUOTED_STEP_COLUMNS}) "
    f"SELECT {', '.join(':' + c for c in STEP_COLUMNS)} "
    "WHERE EXISTS (SELECT 1 FROM runs WHERE id = :run_id AND status = 'running') "
    'ON CONFLICT (run_id, "index") DO NOTHING',
    STEPS,
    *STEP_COLUMNS,
)
_RECORD_STEP = _sql(_STEP_INSERT + "DO UPDATE SET " + _STEP_OUTCOME, STEPS, *STEP_COLUMNS)
_FINISH_RUN = _sql(_FINISH, RUNS, **_FINISH_TYPES)


def _finish_on_postgresql(with_step: bool, with_charge: bool) -> TextClause:
    """The run's outcome as one PostgreSQL statement of data-modifying CTEs: with the last
    step's record and with the run-seconds charged to its billing code, when given (one round
    trip and one commit where a run used to take three)."""
    ctes = []
    if with_step:
        ctes.append("last_step AS (" + _STEP_INSERT + "DO UPDATE SET " + _STEP_OUTCOME + ")")
    ctes.append(f"finished AS ({_FINISH})")
    if with_charge:
        ctes.append(usage_db.CHARGE_CTE)
    columns = STEP_COLUMNS if with_step else ()
    return _sql(f"WITH {', '.join(ctes)} SELECT id FROM finished", STEPS, *columns, **_FINISH_TYPES)


_FINISH_ON_POSTGRESQL = {
    (step, charge): _finish_on_postgresql(step, charge)
    for step in (False, True)
    for charge in (False, True)
}


def insert_run_once(session: Session, values: dict[str, Any]) -> bool:
    """INSERT the run unless its idempotency key exists; True when this call inserted it.

    `ON CONFLICT DO NOTHING` keeps two racing dispatches of the same key from failing either one.
    """
    return session.execute(_INSERT_RUN, values).scalar_one_or_none() is not None


def insert_runs_once(session: Session, rows: Sequence[dict[str, Any]]) -> set[str]:
    """INSERT many runs, skipping idempotency keys that exist; returns the ids this call
    inserted. One compiled statement executed for all rows: SQLAlchemy batches them into
    multi-row INSERTs ("insertmanyvalues") without compiling a statement per batch."""
    if len(rows) == 1:
        return {rows[0]["id"]} if insert_run_once(session, rows[0]) else set()
    dialect = session.get_bind().dialect.name
    stmt = _INSERT_MANY.get(dialect)
    if stmt is None:
        stmt = _INSERT_MANY[dialect] = (
            _dialect_insert(dialect)
            .on_conflict_do_nothing(index_elements=["idempotency_key"])
            .returning(RUNS.c.id)
        )
    params = [{c: row[c] for c in RUN_INSERT_COLUMNS} for row in rows]
    return {run_id for run_id in session.execute(stmt, params).scalars() if run_id is not None}


_INSERT_MANY: dict[str, Any] = {}


def _dialect_insert(dialect: str) -> Any:
    """The dialect's INSERT with ON CONFLICT support (PostgreSQL or SQLite)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(RUNS)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(RUNS)


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
    trigger: dict[str, Any]
    attempt: int
    rule_hash: str | None
    rule_trust: str | None = None


def claim_run(
    session: Session, run_id: str, worker: str, lease_until: datetime
) -> ClaimedRun | None:
    """Move a queued run to running under this worker's lease; None if someone else has it.

    A claim repeated by the same worker (its first COMMIT's answer was lost with the
    connection, see `ade_tasks.db.retry`) claims the run again instead of losing it.

    The rule's current content hash comes back in the same statement (None if the rule was
    deleted); workers keep parsed rules by hash, so the document is read only on a miss.
    """
    params = {"id": run_id, "worker": worker, "lease_expires_at": lease_until}
    row = session.execute(_CLAIM, {**params, "started_at": utcnow()}).first()
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
class StepRecord:
    """One step as the runner reports it: started, or finished with its outcome."""

    run_id: str
    index: int
    step_id: str
    action_type: str
    started_at: datetime
    status: StepStatus = StepStatus.RUNNING
    finished_at: datetime | None = None
    exit_code: int | None = None
    output: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def values(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "index": self.index,
            "step_id": self.step_id,
            "action_type": self.action_type,
            "started_at": self.started_at,
            "status": self.status,
            "finished_at": self.finished_at,
            "exit_code": self.exit_code,
            "output": self.output,
            "result": self.result,
            "error": self.error[:MAX_ERROR] if self.error else self.error,
        }


def announce_step(session: Session, step: StepRecord) -> None:
    """Show a step as running; a no-op if its outcome was recorded first (a race we allow) or
    its run is no longer running."""
    session.execute(_ANNOUNCE_STEP, step.values())


def record_step(session: Session, step: StepRecord) -> None:
    """Record a step's outcome, whether or not it was announced as running."""
    session.execute(_RECORD_STEP, step.values())


@dataclass(frozen=True)
class RunVerdict:
    """What a finished run amounts to: its review-queue status, confidence and findings."""

    queue_status: str | None = None
    confidence: float | None = None
    findings: list[dict[str, Any]] | None = None


def finish_run(
    session: Session,
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
    params: dict[str, Any] = {
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
        statement = _FINISH_ON_POSTGRESQL[(last_step is not None, charge is not None)]
        return session.execute(statement, params).scalar_one_or_none() is not None
    if last_step is not None:
        record_step(session, last_step)
    if session.execute(_FINISH_RUN, params).scalar_one_or_none() is None:
        return False
    if charge is not None:
        usage_db.add_usage(session, charge.billing_code, charge.day, run_seconds=charge.run_seconds)
    return True


def list_steps(session: Session, run_id: str) -> Sequence[RunStepRow]:
    """The run's steps in order."""
    return session.scalars(
        select(RunStepRow).where(RunStepRow.run_id == run_id).order_by(RunStepRow.index)
    ).all()


def append_event(
    session: Session, run_id: str, kind: str, data: dict[str, Any], step_index: int | None = None
) -> None:
    """Append one line to the run's transcript."""
    session.execute(
        insert(EVENTS).values(
            run_id=run_id, kind=kind, data=data, step_index=step_index, at=utcnow()
        )
    )


def events_of(session: Session, run_id: str, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    """The run's transcript (kind, data), oldest first; only kinds starting with `prefix`."""
    stmt = select(EVENTS.c.kind, EVENTS.c.data).where(EVENTS.c.run_id == run_id)
    if prefix:
        stmt = stmt.where(EVENTS.c.kind.startswith(prefix))
    return [(kind, dict(data)) for kind, data in session.execute(stmt.order_by(EVENTS.c.id))]


# --- listing with cursor pagination ---------------------------------------------------------


class InvalidCursorError(InvalidInputError):
    """The pagination cursor is not one this API handed out."""


@dataclass(frozen=True)
class RunFilter:
    """Filters of the run history; all given ones must match."""

    rule_id: str | None = None
    status: str | None = None
    trigger_type: str | None = None
    since: datetime | None = None
    queue_status: str | None = None
    until: datetime | None = None
    id_prefix: str | None = None  # the short ids people copy from `runs list` and the web page


def encode_cursor(row: RunRow) -> str:
    """An opaque cursor pointing after `row` in newest-first order."""
    raw = f"{row.queued_at.isoformat()}|{row.id}"
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor.encode()).decode()
        stamp, run_id = raw.split("|", 1)
        when = datetime.fromisoformat(stamp)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursorError(
            f"cursor {cursor!r} is not valid; pass the `next_cursor` of a previous page"
        ) from None
    if when.tzinfo is None:
        raise InvalidCursorError(f"cursor {cursor!r} is not valid; pass a `next_cursor` value")
    return when, run_id


def list_runs(
    session: Session, filters: RunFilter, *, limit: int = DEFAULT_PAGE, cursor: str | None = None
) -> tuple[Sequence[RunRow], str | None]:
    """One page of runs, newest first, and the cursor of the next page (None on the last)."""
    limit = max(1, min(limit, MAX_PAGE))
    stmt = select(RunRow)
    if filters.rule_id:
        stmt = stmt.where(RunRow.rule_id == filters.rule_id)
    if filters.status:
        stmt = stmt.where(RunRow.status == filters.status)
    if filters.trigger_type:
        stmt = stmt.where(RunRow.trigger_type == filters.trigger_type)
    if filters.since:
        stmt = stmt.where(RunRow.queued_at >= filters.since)
    if filters.queue_status:
        stmt = stmt.where(RunRow.queue_status == filters.queue_status)
    if filters.until:
        stmt = stmt.where(RunRow.queued_at < filters.until)
    if filters.id_prefix:
        stmt = stmt.where(RunRow.id.startswith(filters.id_prefix, autoescape=True))
    if cursor:
        when, run_id = _decode_cursor(cursor)
        stmt = stmt.where(
            or_(RunRow.queued_at < when, and_(RunRow.queued_at == when, RunRow.id < run_id))
        )
    rows = session.scalars(
        stmt.order_by(RunRow.queued_at.desc(), RunRow.id.desc()).limit(limit + 1)
    ).all()
    if len(rows) > limit:
        return rows[:limit], encode_cursor(rows[limit - 1])
    return rows, None


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


# --- the operator's view of one run: events, progress, cancel, retry ------------------------

CANCELLED_EVENT = "run.cancelled"
RETRIED_EVENT = "run.retried"


@dataclass(frozen=True)
class EventLine:
    """One line of a run's transcript, with its id (the cursor of the events API)."""

    id: int
    run_id: str
    at: datetime
    kind: str
    step_index: int | None
    data: dict[str, Any]


_EVENT_COLUMNS = (EVENTS.c.id, EVENTS.c.run_id, EVENTS.c.at, EVENTS.c.kind, EVENTS.c.step_index,
                  EVENTS.c.data)  # fmt: skip


def events_after(
    session: Session, run_id: str, after: int = 0, limit: int = 1000
) -> list[EventLine]:
    """The run's events with ids above `after`, oldest first, at most `limit`."""
    stmt = (
        select(*_EVENT_COLUMNS)
        .where(EVENTS.c.run_id == run_id, EVENTS.c.id > after)
        .order_by(EVENTS.c.id)
        .limit(limit)
    )
    return [EventLine(*row[:5], dict(row[5])) for row in session.execute(stmt)]


@dataclass(frozen=True)
class RunState:
    """What a follower needs of a run: where it is."""

    id: str
    status: str
    worker: str | None
    error: str | None
    finished_at: datetime | None


@dataclass(frozen=True)
class StepState:
    """A step's progress without its output."""

    run_id: str
    index: int
    step_id: str
    action_type: str
    status: str
    exit_code: int | None
    error: str | None
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class Progress:
    """Runs, their steps and their new events, read together for many followed runs."""

    runs: dict[str, RunState]
    steps: list[StepState]
    events: list[EventLine]
    events_truncated: bool


def progress_of(session: Session, cursors: dict[str, int], event_limit: int = 2000) -> Progress:
    """The status, steps and events after each cursor of the runs in `cursors` (run id -> last
    event id seen), in three statements however many runs are followed. The run status is
    read first, so everything written before a run ended is visible to the later reads."""
    ids = list(cursors)
    if not ids:
        return Progress({}, [], [], False)
    runs = {
        row.id: RunState(*row)
        for row in session.execute(
            select(RUNS.c.id, RUNS.c.status, RUNS.c.worker, RUNS.c.error, RUNS.c.finished_at)
            .where(RUNS.c.id.in_(ids))
        )
    }  # fmt: skip
    steps = [
        StepState(*row)
        for row in session.execute(
            select(STEPS.c.run_id, STEPS.c.index, STEPS.c.step_id, STEPS.c.action_type,
                   STEPS.c.status, STEPS.c.exit_code, STEPS.c.error, STEPS.c.started_at,
                   STEPS.c.finished_at)
            .where(STEPS.c.run_id.in_(ids))
            .order_by(STEPS.c.run_id, STEPS.c.index)
        )
    ]  # fmt: skip
    lowest = min(cursors.values())
    wanted = or_(*(and_(EVENTS.c.run_id == r, EVENTS.c.id > c) for r, c in cursors.items()))
    rows = session.execute(
        select(*_EVENT_COLUMNS)
        .where(EVENTS.c.id > lowest, wanted)
        .order_by(EVENTS.c.id)
        .limit(event_limit)
    ).all()
    events = [EventLine(*row[:5], dict(row[5])) for row in rows]
    return Progress(runs, steps, events, len(rows) >= event_limit)


def step_output_tails(
    session: Session, keys: Sequence[tuple[str, int]], lines: int = 20
) -> dict[tuple[str, int], str]:
    """The last `lines` lines of these steps' (masked, capped) output."""
    if not keys:
        return {}
    wanted = or_(*(and_(STEPS.c.run_id == r, STEPS.c.index == i) for r, i in keys))
    rows = session.execute(select(STEPS.c.run_id, STEPS.c.index, STEPS.c.output).where(wanted))
    return {(r, i): "\n".join((out or "").rstrip().splitlines()[-lines:]) for r, i, out in rows}


def _sum_usage(totals: dict[str, Any], input_tokens: Any, output_tokens: Any, cost: Any) -> None:
    totals["input_tokens"] += int(input_tokens or 0)
    totals["output_tokens"] += int(output_tokens or 0)
    if cost is not None:
        totals["cost_usd"] = (totals["cost_usd"] or 0.0) + float(cost)


def agent_usage(session: Session, run_id: str, steps: Sequence[RunStepRow]) -> dict[str, Any]:
    """Tokens and cost of the run's agent steps: a finished step's result holds its session's
    totals; a step still going (or parked) is counted from its recorded model turns and CLI
    results. Returns {input_tokens, output_tokens, tokens, cost_usd, steps: [...]}."""
    totals: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cost_usd": None}
    per_step: list[dict[str, Any]] = []
    counted: set[str] = set()
    for step in steps:
        result = step.result or {}
        if "input_tokens" not in result and "output_tokens" not in result:
            continue
        counted.add(step.step_id)
        one: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cost_usd": None}
        _sum_usage(one, result.get("input_tokens"), result.get("output_tokens"),
                   result.get("cost_usd"))  # fmt: skip
        per_step.append({"index": step.index, "step_id": step.step_id, "final": True, **one,
                         "turns": result.get("turns")})  # fmt: skip
        _sum_usage(totals, one["input_tokens"], one["output_tokens"], one["cost_usd"])
    live: dict[str, dict[str, Any]] = {}
    kinds = ("agent.model_turn", "agent.cli_result")
    for (data,) in session.execute(
        select(EVENTS.c.data).where(EVENTS.c.run_id == run_id, EVENTS.c.kind.in_(kinds))
    ):
        step_id = str(data.get("step") or "")
        if step_id in counted:
            continue
        one = live.setdefault(step_id, {"input_tokens": 0, "output_tokens": 0, "cost_usd": None})
        usage = data.get("usage") or {}
        _sum_usage(one, usage.get("input_tokens"), usage.get("output_tokens"),
                   data.get("cost_usd"))  # fmt: skip
    for step_id, one in live.items():
        per_step.append({"index": None, "step_id": step_id, "final": False, **one, "turns": None})
        _sum_usage(totals, one["input_tokens"], one["output_tokens"], one["cost_usd"])
    totals["tokens"] = totals["input_tokens"] + totals["output_tokens"]
    return {**totals, "steps": per_step}


CLEANUP_FAILED_EVENT = "run.cleanup_failed"


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


def cancel_run(
    session: Session, run_id: str, by: str, note: str | None = None
) -> tuple[RunRow, str]:
    """Cancel a queued, waiting or running run; returns it and the status it had. The one
    cancel of a single run: the API, the CLI and `ade-action runs.cancel` all come here.

    A queued run's message (if any) finds it cancelled and does nothing; a running run's
    worker sees it within half a second (`is_cancelled`) and kills everything the step's
    command started (as for overlap `cancel-other`). Its running steps are marked failed,
    its pending approvals cancelled and the transcript says who cancelled it.
    IllegalTransitionError (a ConflictError) when the run already finished.
    """
    for _ in range(5):  # the run may move (queued -> running) between the read and the update
        row = get_run(session, run_id)
        was = row.status
        if was in FINAL_STATUSES:
            raise IllegalTransitionError(
                f"run {run_id} already finished ({was}); nothing to cancel"
            )
        CANCEL.check(was, RunStatus.CANCELLED)
        now = utcnow()
        reason = f"cancelled by {by}" + (f": {note}" if note else "")
        done = session.execute(
            update(RUNS)
            .where(RUNS.c.id == run_id, RUNS.c.status == was)
            .values(status=RunStatus.CANCELLED, error=reason[:MAX_ERROR], finished_at=now,
                    lease_expires_at=None, buffered=False)
            .returning(RUNS.c.id)
        ).scalar_one_or_none()  # fmt: skip
        session.expire(row)
        if done is None:
            continue
        _settle_cancelled(session, {run_id: was}, by, note, now)
        return get_run(session, run_id), was
    raise ConflictError(f"run {run_id} kept changing status; try cancelling it again")


def _settle_cancelled(
    session: Session, was: dict[str, str], by: str, note: str | None, now: datetime
) -> None:
    """What every cancel leaves behind: the runs' running steps failed with the reason, their
    pending approvals cancelled (no operator is asked about a cancelled run), and a
    `run.cancelled` event saying who cancelled each and what it was."""
    reason = (f"cancelled by {by}" + (f": {note}" if note else ""))[:MAX_ERROR]
    run_ids = list(was)
    session.execute(
        update(STEPS)
        .where(STEPS.c.run_id.in_(run_ids), STEPS.c.status == StepStatus.RUNNING)
        .values(status=StepStatus.FAILED, finished_at=now, error=reason)
    )
    session.execute(
        update(ApprovalRow)
        .where(ApprovalRow.run_id.in_(run_ids), ApprovalRow.status == ApprovalStatus.PENDING)
        .values(status=ApprovalStatus.CANCELLED, decided_by=by, decided_at=now, note=note)
    )
    for run_id, status in was.items():
        append_event(session, run_id, CANCELLED_EVENT, {"by": by, "note": note, "was": status})


def retry_source(session: Session, run_id: str) -> RunRow:
    """The finished run to retry; ConflictError while it is still active."""
    row = get_run(session, run_id)
    if row.status not in FINAL_STATUSES:
        raise ConflictError(
            f"run {run_id} is still {row.status}; only a finished run can be retried "
            f"(cancel it first with `ade-tasks runs cancel {run_id}`)"
        )
    return row


# --- recovery ---------------------------------------------------------------------------------


def take_unsent_runs(session: Session, older_than: timedelta, limit: int = 500) -> list[RunRow]:
    """Queued runs whose last send is older than the bound; marks them re-sent now.

    The conditional UPDATE means two sweeps running at once never re-send the same run twice.
    """
    now = utcnow()
    cutoff = now - older_than
    candidates = session.scalars(
        select(RunRow.id)
        .where(
            RunRow.status == RunStatus.QUEUED,
            RunRow.buffered.is_(False),
            func.coalesce(RunRow.sent_at, RunRow.queued_at) <= cutoff,
        )
        .order_by(RunRow.queued_at)
        .limit(limit)
    ).all()
    taken: list[RunRow] = []
    for run_id in candidates:
        got = session.execute(
            update(RunRow)
            .where(
                RunRow.id == run_id,
                RunRow.status == RunStatus.QUEUED,
                func.coalesce(RunRow.sent_at, RunRow.queued_at) <= cutoff,
            )
            .values(sent_at=now, send_count=RunRow.send_count + 1)
            .returning(RunRow.id)
        ).scalar_one_or_none()
        if got is not None:
            row = session.get(RunRow, run_id)
            if row is not None:
                taken.append(row)
    return taken


#: How often the sweep puts a run whose worker died back in the queue; after that the run
#: fails, so a run that kills its worker (e.g. runs it out of memory) cannot loop.
MAX_WORKER_LOST_RESUMES = 2
RESUMED_EVENT = "run.resumed_after_worker_lost"
#: Written by the worker that resumes a run: what it did with the step its lost worker ran.
INTERRUPTED_EVENT = "run.step_interrupted"
#: The error of the step that was running when its worker died and may not run again.
STEP_WORKER_LOST = (
    "worker lost while this step ran (the worker crashed or was killed); its processes were "
    "killed with it. Set `retry` on the step to run it again on another worker, or trigger "
    "the rule again"
)


@dataclass(frozen=True)
class ExpiredLeases:
    """What the lease sweep did: runs it failed, and runs it queued again (to send now)."""

    failed: list[str] = field(default_factory=list)
    resumed: list[RunRow] = field(default_factory=list)


def _worker_lost_resumes(session: Session, run_id: str) -> int:
    """How often the run was put back in the queue after losing its worker."""
    return int(
        session.execute(
            select(func.count()).where(EVENTS.c.run_id == run_id, EVENTS.c.kind == RESUMED_EVENT)
        ).scalar_one()
    )


@dataclass(frozen=True)
class Interruption:
    """A run resumed after its worker was lost, as the resuming worker sees it."""

    pending: bool  # a resume nobody handled yet: the first unfinished step was interrupted
    reruns: dict[int, int]  # step index -> how often it already ran again after a loss


def interruption_of(session: Session, run_id: str) -> Interruption:
    """What the earlier losses of this run's workers left for the next attempt to decide."""
    rows = session.execute(
        select(EVENTS.c.kind, EVENTS.c.data)
        .where(EVENTS.c.run_id == run_id, EVENTS.c.kind.in_((RESUMED_EVENT, INTERRUPTED_EVENT)))
    ).all()  # fmt: skip
    resumes = sum(1 for kind, _ in rows if kind == RESUMED_EVENT)
    handled = [data for kind, data in rows if kind == INTERRUPTED_EVENT]
    reruns: dict[int, int] = {}
    for data in handled:
        if data.get("rerun"):
            reruns[int(data["index"])] = reruns.get(int(data["index"]), 0) + 1
    return Interruption(pending=resumes > len(handled), reruns=reruns)


def fail_expired_leases(session: Session, now: datetime | None = None) -> ExpiredLeases:
    """Queue again the running runs whose worker stopped renewing its lease (it died).

    The next worker continues the run after its last finished step (every finished step is
    recorded before the next one starts) and decides what to do with the step that was running
    when the worker died (see `ade_workers.runner`): an agent session continues from its
    recorded events; another step runs again only if its `retry` allows it, and is otherwise
    recorded failed, its command having been killed with its worker. A run that lost its worker
    MAX_WORKER_LOST_RESUMES times already fails instead, "worker lost". A step left `running`
    stays so while the run is queued again; the resumed attempt records its outcome over it.
    """
    now = now or utcnow()
    expired = session.scalars(
        select(RunRow.id).where(RunRow.status == RunStatus.RUNNING, RunRow.lease_expires_at < now)
    ).all()
    done = ExpiredLeases()
    for run_id in expired:
        still_expired = (
            RunRow.id == run_id,
            RunRow.status.in_(RESUME_LOST.sources & FAIL_LOST.sources),
            RunRow.lease_expires_at < now,
        )
        resumes = _worker_lost_resumes(session, run_id)
        if resumes < MAX_WORKER_LOST_RESUMES:
            # Marked sent now: the caller sends it, and `take_unsent_runs` only if that fails.
            resumed = session.execute(
                update(RunRow)
                .where(*still_expired)
                .values(
                    status=RunStatus.QUEUED,
                    worker=None,
                    lease_expires_at=None,
                    sent_at=now,
                    send_count=RunRow.send_count + 1,
                )
                .returning(RunRow.id)
            ).scalar_one_or_none()
            if resumed is not None:
                append_event(session, run_id, RESUMED_EVENT, {"resume": resumes + 1})
                row = session.get(RunRow, run_id)
                assert row is not None
                done.resumed.append(row)
            continue
        error = (
            f"worker lost: the run lost its worker again after it was resumed {resumes} times "
            f"(at most {MAX_WORKER_LOST_RESUMES}); trigger the rule again"
        )
        result = session.execute(
            update(RunRow)
            .where(*still_expired)
            .values(status=RunStatus.FAILED, finished_at=now, lease_expires_at=None, error=error)
            .returning(RunRow.id)
        ).scalar_one_or_none()
        if result is not None:
            session.execute(
                update(RunStepRow)
                .where(RunStepRow.run_id == run_id, RunStepRow.status == StepStatus.RUNNING)
                .values(status=StepStatus.FAILED, finished_at=now, error="worker lost")
            )
            append_event(session, run_id, "run.worker_lost", {"worker_lease_expired": True})
            done.failed.append(run_id)
    return done


# --- overlap policy ---------------------------------------------------------------------------

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


def lock_rules(session: Session, rule_ids: Sequence[str]) -> None:
    """`lock_rule` for many rules in one statement, taking the locks in one global order so
    that two batches locking overlapping rules never deadlock."""
    if len(rule_ids) == 1:
        lock_rule(session, rule_ids[0])
    elif rule_ids and session.get_bind().dialect.name == "postgresql":
        session.execute(_LOCK_RULES, {"ids": list(rule_ids)})


def count_active_many(session: Session, rule_ids: Sequence[str]) -> dict[str, int]:
    """`count_active` for many rules (one query); rules with none are absent."""
    if not rule_ids:
        return {}
    rows = session.execute(
        select(RunRow.rule_id, func.count())
        .where(RunRow.rule_id.in_(list(rule_ids)))
        .where(
            or_(
                RunRow.status.in_(ACTIVE),
                and_(RunRow.status == RunStatus.QUEUED, RunRow.buffered.is_(False)),
            )
        )
        .group_by(RunRow.rule_id)
    )
    return {rule_id: int(count) for rule_id, count in rows}


def rules_buffering(session: Session, rule_ids: Sequence[str]) -> set[str]:
    """Which of these rules have a run waiting in their overlap buffer (one query)."""
    if not rule_ids:
        return set()
    rows = session.scalars(
        select(RunRow.rule_id)
        .where(RunRow.rule_id.in_(list(rule_ids)))
        .where(RunRow.buffered.is_(True), RunRow.status == RunStatus.QUEUED)
        .distinct()
    )
    return set(rows)


def lock_rule(session: Session, rule_id: str) -> None:
    """Serialize overlap decisions for one rule until the transaction ends.

    PostgreSQL: a transaction-scoped advisory lock on the rule id. SQLite: its transactions
    already take the write lock up front (BEGIN IMMEDIATE), so there is nothing to add.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_LOCK_RULE, {"rule_id": rule_id})


def count_active(session: Session, rule_id: str) -> int:
    """How many of the rule's concurrency slots are taken."""
    return int(session.execute(_COUNT_ACTIVE, {"rule_id": rule_id}).scalar_one())


def has_buffered(session: Session, rule_id: str) -> bool:
    """Is a run of the rule waiting in the overlap buffer?"""
    found = session.scalar(
        select(RunRow.id)
        .where(RunRow.rule_id == rule_id, RunRow.buffered.is_(True))
        .where(RunRow.status == RunStatus.QUEUED)
        .limit(1)
    )
    return found is not None


def cancel_active(session: Session, rule_id: str, by: str, note: str) -> list[str]:
    """Cancel the rule's active and buffered runs (overlap `cancel-other`), settled as any
    cancel is; a running one's worker notices within half a second (`is_cancelled`) and kills
    everything the step started."""
    now = utcnow()
    reason = f"cancelled by {by}: {note}"[:MAX_ERROR]
    active = (RUNS.c.rule_id == rule_id, RUNS.c.status.in_(CANCEL.sources))
    before = {
        row.id: row.status
        for row in session.execute(select(RUNS.c.id, RUNS.c.status).where(*active))
    }
    result = session.execute(
        update(RUNS)
        .where(*active)
        .values(
            status=RunStatus.CANCELLED,
            error=reason,
            finished_at=now,
            lease_expires_at=None,
            buffered=False,
        )
        .returning(RUNS.c.id)
    )
    # A run claimed between the two statements was queued when read and is running now.
    was = {str(run_id): str(before.get(run_id, RunStatus.RUNNING)) for run_id in result.scalars()}
    if was:
        _settle_cancelled(session, was, by, note, now)
    return list(was)


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


def rules_with_buffered_runs(session: Session) -> list[str]:
    """Rules that have runs waiting in their overlap buffer."""
    return list(
        session.scalars(
            select(RunRow.rule_id)
            .where(RunRow.buffered.is_(True), RunRow.status == RunStatus.QUEUED)
            .distinct()
        )
    )
