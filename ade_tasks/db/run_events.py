"""Query functions for a run's transcript (`run_events`): appending lines and reading them back.

The transcript is append-only: agent messages, tool calls, approvals, cancels, the recovery
sweep's resumes. Which kinds each writer appends is declared beside the writer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, insert, select
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.schema import RunEventRow
from ade_tasks.json_document import JsonObject

EVENTS = cast(Table, RunEventRow.__table__)
#: The kind of the events that carry a running command step's output as it is printed
#: (`ade_workers.actions.live_output`): data `{"offset", "text"}`, the last `"capped"` if cut.
STEP_OUTPUT = "step.output"


def append_event(
    session: Session, run_id: str, kind: str, data: JsonObject, step_index: int | None = None
) -> None:
    """Append one line to the run's transcript."""
    session.execute(
        insert(EVENTS).values(
            run_id=run_id, kind=kind, data=data, step_index=step_index, at=utcnow()
        )
    )


def events_of(session: Session, run_id: str, prefix: str = "") -> list[tuple[str, JsonObject]]:
    """The run's transcript (kind, data), oldest first; only kinds starting with `prefix`."""
    stmt = select(EVENTS.c.kind, EVENTS.c.data).where(EVENTS.c.run_id == run_id)
    if prefix:
        stmt = stmt.where(EVENTS.c.kind.startswith(prefix))
    return [(kind, dict(data)) for kind, data in session.execute(stmt.order_by(EVENTS.c.id))]


@dataclass(frozen=True)
class EventLine:
    """One line of a run's transcript, with its id (the cursor of the events API)."""

    id: int
    run_id: str
    at: datetime
    kind: str
    step_index: int | None
    data: JsonObject


#: The columns an `EventLine` is read from, in its fields' order.
EVENT_LINE_COLUMNS = (EVENTS.c.id, EVENTS.c.run_id, EVENTS.c.at, EVENTS.c.kind,
                      EVENTS.c.step_index, EVENTS.c.data)  # fmt: skip


def event_lines(rows: Iterable[Sequence[Any]]) -> list[EventLine]:
    """`EventLine`s of rows selected with `EVENT_LINE_COLUMNS`."""
    return [EventLine(row[0], row[1], row[2], row[3], row[4], dict(row[5])) for row in rows]


def events_after(
    session: Session, run_id: str, after: int = 0, limit: int = 1000
) -> list[EventLine]:
    """The run's events with ids above `after`, oldest first, at most `limit`."""
    stmt = (
        select(*EVENT_LINE_COLUMNS)
        .where(EVENTS.c.run_id == run_id, EVENTS.c.id > after)
        .order_by(EVENTS.c.id)
        .limit(limit)
    )
    return event_lines(session.execute(stmt))


@dataclass(frozen=True)
class LiveOutput:
    """The live output of a run's steps so far: text per step index, the steps whose output
    reached the cap (and that cap), and the id of the last such event (0: none)."""

    text: dict[int, str]
    capped: dict[int, int]
    last_id: int


def live_output(session: Session, run_id: str) -> LiveOutput:
    """The `step.output` events of the run so far, joined per step."""
    stmt = (
        select(EVENTS.c.id, EVENTS.c.step_index, EVENTS.c.data)
        .where(EVENTS.c.run_id == run_id, EVENTS.c.kind == STEP_OUTPUT)
        .order_by(EVENTS.c.id)
    )
    text: dict[int, list[str]] = {}
    capped: dict[int, int] = {}
    last_id = 0
    for event_id, index, data in session.execute(stmt):
        text.setdefault(index, []).append(str(data.get("text") or ""))
        if data.get("capped"):
            capped[index] = int(data["capped"])
        last_id = event_id
    return LiveOutput({index: "".join(parts) for index, parts in text.items()}, capped, last_id)
