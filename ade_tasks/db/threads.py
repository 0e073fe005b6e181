"""Query functions of durable agent threads (`agent_thread_entries`).

A thread is named by (project, key): the key a session's `thread:` template rendered to, scoped
to its rule's project, so two rules of one project that render the same key share a thread (a
fix rule and a review-answering rule continue one conversation per pull request), and rules of
two projects never do. Entries are appended when a session ends and never updated: two sessions
of one key that end at the same time both keep their entry, ordered by id. A session reads the
entries up to the newest id there was when it started (`entries_of(..., up_to=...)`), so what it
was given stays the same if its run is resumed, and a session running at the same time as
another with the same key sees the other's conversation only if it ended before it started.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from ade_tasks.agents.threads import MAX_ENTRIES, Entry, Turn
from ade_tasks.clock import utcnow
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db.thread_tables import ThreadEntryRow
from ade_tasks.json_document import JsonObject

#: Entries older than this are deleted when a session of any thread ends.
RETENTION = timedelta(days=90)


@dataclass(frozen=True)
class NewEntry:
    """What an ended session adds to its thread."""

    project: str
    key: str
    run_id: str
    step_id: str
    rule_id: str
    status: str
    summary: str
    tainted: bool
    turns: Sequence[Turn]


def append_entry(session: Session, entry: NewEntry, now: datetime | None = None) -> int:
    """Append `entry` to its thread; prune the thread to its newest `MAX_ENTRIES` and every
    thread's entries older than `RETENTION`. Returns the new entry's id."""
    now = now or utcnow()
    row = ThreadEntryRow(
        project=entry.project,
        key=entry.key,
        run_id=entry.run_id,
        step_id=entry.step_id,
        rule_id=entry.rule_id,
        status=entry.status,
        summary=entry.summary[:4_000],
        tainted=entry.tainted,
        created_at=now,
        turns=[turn.as_dict() for turn in entry.turns],
        chars=sum(len(turn.text) for turn in entry.turns),
    )
    session.add(row)
    session.flush()
    same = (ThreadEntryRow.project == entry.project) & (ThreadEntryRow.key == entry.key)
    keep_from = session.scalar(
        select(ThreadEntryRow.id)
        .where(same)
        .order_by(ThreadEntryRow.id.desc())
        .offset(MAX_ENTRIES - 1)
        .limit(1)
    )
    if keep_from is not None:
        session.execute(delete(ThreadEntryRow).where(same, ThreadEntryRow.id < keep_from))
    session.execute(delete(ThreadEntryRow).where(ThreadEntryRow.created_at < now - RETENTION))
    return row.id


def newest_id(session: Session, project: str, key: str) -> int:
    """The id of the thread's newest entry (0: none yet)."""
    newest = session.scalar(
        select(func.max(ThreadEntryRow.id)).where(
            ThreadEntryRow.project == project, ThreadEntryRow.key == key
        )
    )
    return int(newest or 0)


def entries_of(session: Session, project: str, key: str, up_to: int | None = None) -> list[Entry]:
    """The thread's entries, oldest first (those with an id up to `up_to`, if given)."""
    query = select(ThreadEntryRow).where(
        ThreadEntryRow.project == project, ThreadEntryRow.key == key
    )
    if up_to is not None:
        query = query.where(ThreadEntryRow.id <= up_to)
    return [_entry(row) for row in session.scalars(query.order_by(ThreadEntryRow.id))]


@dataclass(frozen=True)
class ThreadRun:
    """One session of a thread, as a run page lists it."""

    run_id: str
    step_id: str
    rule_id: str
    status: str
    created_at: datetime


def runs_of(session: Session, project: str, key: str) -> list[ThreadRun]:
    """The sessions a thread holds, oldest first (without their turns)."""
    rows = session.execute(
        select(
            ThreadEntryRow.run_id,
            ThreadEntryRow.step_id,
            ThreadEntryRow.rule_id,
            ThreadEntryRow.status,
            ThreadEntryRow.created_at,
        )
        .where(ThreadEntryRow.project == project, ThreadEntryRow.key == key)
        .order_by(ThreadEntryRow.id)
    )
    return [ThreadRun(*row) for row in rows]


@dataclass(frozen=True)
class RunThread:
    """A thread one agent step of a run took part in: its key, the runs the step was given
    when it started, and every session the thread holds now (the run's own once it ended)."""

    step: str
    project: str
    key: str
    continued: list[str]
    runs: list[ThreadRun]

    def as_dict(self) -> JsonObject:
        """The JSON shape the run API and `ade-tasks runs show --json` give."""
        return {
            "step": self.step,
            "project": self.project,
            "key": self.key,
            "continued": self.continued,
            "runs": [
                {
                    "run_id": r.run_id,
                    "step": r.step_id,
                    "rule_id": r.rule_id,
                    "status": r.status,
                    "ended_at": r.created_at.isoformat(),
                }
                for r in self.runs
            ],
        }


#: The run event an agent step records when it opens its thread.
THREAD_EVENT = "agent.thread"


def threads_of_run(session: Session, run_id: str) -> list[RunThread]:
    """The threads the run's agent steps opened (`agent.thread` events), in order."""
    threads = []
    for kind, data in run_events_db.events_of(session, run_id, THREAD_EVENT):
        if kind != THREAD_EVENT:
            continue
        project, key = str(data.get("project", "")), str(data.get("key", ""))
        threads.append(
            RunThread(
                step=str(data.get("step", "")),
                project=project,
                key=key,
                continued=[str(r) for r in data.get("continues") or []],
                runs=runs_of(session, project, key),
            )
        )
    return threads


def _entry(row: ThreadEntryRow) -> Entry:
    return Entry(
        id=row.id,
        run_id=row.run_id,
        step_id=row.step_id,
        rule_id=row.rule_id,
        status=row.status,
        summary=row.summary,
        tainted=row.tainted,
        created_at=row.created_at,
        turns=Entry.turns_from(row.turns),
    )
