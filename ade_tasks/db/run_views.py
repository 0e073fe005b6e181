"""Read models of runs for the API, the CLI and the web page: the run history a page at a time,
the progress of followed runs, step output tails and an agent run's token usage.

Reads only; every write of a run is in `runs`, `run_steps`, `run_events`, `run_cancels`,
`overlap` or `run_recovery`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, or_, select, tuple_
from sqlalchemy.orm import Session

from ade_tasks.db import partitions as partitions_db
from ade_tasks.db.run_events import EVENT_LINE_COLUMNS, EVENTS, EventLine, event_lines
from ade_tasks.db.run_steps import STEPS
from ade_tasks.db.runs import RUNS
from ade_tasks.db.schema import RunRow, RunStepRow
from ade_tasks.errors import GoneError, InvalidInputError
from ade_tasks.json_document import JsonObject

MAX_PAGE = 500
DEFAULT_PAGE = 100


class InvalidCursorError(InvalidInputError):
    """The pagination cursor is not one this API handed out."""


class ExpiredCursorError(GoneError):
    """The pagination cursor points into history that was dropped (its month expired)."""


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


#: The shape of a run id (a lowercase UUID): the least and the greatest character at each place.
_ID_LOW = "00000000-0000-0000-0000-000000000000"
_ID_HIGH = "ffffffff-ffff-ffff-ffff-ffffffffffff"


def id_range(prefix: str) -> tuple[str, str]:
    """The least and the greatest run id starting with `prefix`, for a range scan of the
    primary key. `LIKE 'abc%'` scans the index only under the "C" collation, and a plain
    `>= prefix` range is not one in a collation that ignores the hyphens; whole UUIDs of one
    shape sort the same in every collation, so the padded bounds hold everywhere."""
    return prefix + _ID_LOW[len(prefix) :], prefix + _ID_HIGH[len(prefix) :]


def page_query(filters: RunFilter, limit: int, cursor: str | None = None) -> Select[RunRow]:
    """The statement of one page of runs, newest first, with one row more than `limit` (there is
    a next page when it comes back). Each filter is served by an index ending in `queued_at`
    (tests/integration/test_history_plans.py checks the plans at scale)."""
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
        low, high = id_range(filters.id_prefix)
        stmt = stmt.where(
            RunRow.id >= low, RunRow.id <= high,
            RunRow.id.startswith(filters.id_prefix, autoescape=True),
        )  # fmt: skip
    if cursor:
        # A row comparison, not `a < t OR (a = t AND id < i)`: the index scan starts at the
        # cursor instead of filtering every newer row, so page 1,000 costs what page 1 does.
        # The plain bound beside it lets PostgreSQL prune the months newer than the cursor
        # (partition pruning does not look into row comparisons).
        at, run_id = _decode_cursor(cursor)
        stmt = stmt.where(tuple_(RunRow.queued_at, RunRow.id) < tuple_(at, run_id))
        stmt = stmt.where(RunRow.queued_at <= at)
    return stmt.order_by(RunRow.queued_at.desc(), RunRow.id.desc()).limit(limit + 1)


def list_runs(
    session: Session, filters: RunFilter, *, limit: int = DEFAULT_PAGE, cursor: str | None = None
) -> tuple[Sequence[RunRow], str | None]:
    """One page of runs, newest first, and the cursor of the next page (None on the last).
    A cursor from before the oldest month of runs still held (on a partitioned history, whose
    expired months are dropped) is refused with ExpiredCursorError: its pages are gone.

    Only an empty page needs that check, so only an empty page pays its catalog reads (is
    `runs` partitioned, its months, a probe of its DEFAULT partition): a cursor into dropped
    history always gives one, because every row older than the oldest month kept went with its
    month (`oldest_retained` is None while the DEFAULT partition holds an older row)."""
    limit = max(1, min(limit, MAX_PAGE))
    rows = session.scalars(page_query(filters, limit, cursor)).all()
    if len(rows) > limit:
        return rows[:limit], encode_cursor(rows[limit - 1])
    if cursor and not rows:
        _refuse_expired(session, cursor)
    return rows, None


def _refuse_expired(session: Session, cursor: str) -> None:
    """ExpiredCursorError when `cursor` points before the oldest month of runs still held."""
    at, _ = _decode_cursor(cursor)
    oldest = partitions_db.oldest_retained(session)
    if oldest is not None and at < oldest:
        raise ExpiredCursorError(
            f"cursor {cursor!r} points to runs queued at {at.isoformat()}, and the history "
            f"before {oldest.isoformat()} was dropped (run retention); start again "
            "without a cursor for the newest runs, or narrow the list with `since`"
        )


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
        select(*EVENT_LINE_COLUMNS)
        .where(EVENTS.c.id > lowest, wanted)
        .order_by(EVENTS.c.id)
        .limit(event_limit)
    ).all()
    events = event_lines(rows)
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


def _sum_usage(totals: JsonObject, input_tokens: Any, output_tokens: Any, cost: Any) -> None:
    totals["input_tokens"] += int(input_tokens or 0)
    totals["output_tokens"] += int(output_tokens or 0)
    if cost is not None:
        totals["cost_usd"] = (totals["cost_usd"] or 0.0) + float(cost)


def agent_usage(session: Session, run_id: str, steps: Sequence[RunStepRow]) -> JsonObject:
    """Tokens and cost of the run's agent steps: a finished step's result holds its session's
    totals; a step still going (or parked) is counted from its recorded model turns and CLI
    results. Returns {input_tokens, output_tokens, tokens, cost_usd, steps: [...]}."""
    totals: JsonObject = {"input_tokens": 0, "output_tokens": 0, "cost_usd": None}
    per_step: list[JsonObject] = []
    counted: set[str] = set()
    for step in steps:
        result = step.result or {}
        if "input_tokens" not in result and "output_tokens" not in result:
            continue
        counted.add(step.step_id)
        one: JsonObject = {"input_tokens": 0, "output_tokens": 0, "cost_usd": None}
        _sum_usage(one, result.get("input_tokens"), result.get("output_tokens"),
                   result.get("cost_usd"))  # fmt: skip
        per_step.append({"index": step.index, "step_id": step.step_id, "final": True, **one,
                         "turns": result.get("turns")})  # fmt: skip
        _sum_usage(totals, one["input_tokens"], one["output_tokens"], one["cost_usd"])
    live: dict[str, JsonObject] = {}
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
