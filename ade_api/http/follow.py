"""Following runs live: one poller per API process reads every followed run's status, steps
and new events, and fans them out as Server-Sent Events to that run's followers.

Each tick is three short statements on one pooled connection, however many clients follow;
followers only wait on an asyncio event, so a hundred followers cost a hundred idle coroutines.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime

from fastapi import Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from ade_tasks.clock import utcnow
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import run_views as run_views_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.json_document import JsonObject
from ade_tasks.states import FINAL_STATUSES, RunStatus, StepStatus

log = logging.getLogger(__name__)

#: How often the follow poller reads the followed runs (one set of statements for all of them).
POLL_SECONDS = 0.3
#: A comment line this often keeps proxies and clients from timing out an idle stream.
HEARTBEAT_SECONDS = 15.0
#: How often an idle follower checks that its client is still connected.
DISCONNECT_CHECK_SECONDS = 1.0
END = "end"
FINISHED_STEP = frozenset(s.value for s in StepStatus) - {StepStatus.RUNNING, StepStatus.WAITING}


@dataclass(frozen=True)
class _Message:
    """One server-sent event, rendered once for every follower of the run."""

    event_id: int | None
    watermark: int  # the run's last event id when this was emitted
    kind: str
    text: str

    def visible_after(self, after: int) -> bool:
        if after <= 0:
            return True
        return self.event_id > after if self.event_id is not None else self.watermark >= after


@dataclass
class _Feed:
    """A followed run: the messages emitted so far, and what the poller knows of it."""

    run_id: str
    messages: list[_Message] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    followers: int = 0
    cursor: int = 0
    status: str | None = None
    steps: dict[int, str] = field(default_factory=dict)
    done: bool = False

    def emit(self, kind: str, data: JsonObject, event_id: int | None = None,
             step_index: int | None = None, at: datetime | None = None) -> None:  # fmt: skip
        body = {"id": event_id, "at": (at or utcnow()).isoformat(), "kind": kind,
                "step_index": step_index, "data": data}  # fmt: skip
        lines = [] if event_id is None else [f"id: {event_id}"]
        lines += [f"event: {kind}", f"data: {json.dumps(body, default=str)}"]
        self.messages.append(_Message(event_id, self.cursor, kind, "\n".join(lines) + "\n\n"))


class FollowHub:
    """One poller per API process for every followed run, fanning out to their followers.

    Each tick reads the status, steps and new events of all followed runs in three short
    statements on one pooled connection (in the threadpool), however many clients follow
    them; followers only wait on an asyncio event. A feed lives while it has followers.
    """

    def __init__(self, session_factory: SessionFactory) -> None:
        self._sessions = session_factory
        self.feeds: dict[str, _Feed] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def join(self, run_id: str) -> _Feed:
        feed = self.feeds.get(run_id)
        if feed is None:
            feed = self.feeds[run_id] = _Feed(run_id)
            self._wake.set()
        feed.followers += 1
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="ade-follow-poller")
        return feed

    def leave(self, feed: _Feed) -> None:
        feed.followers -= 1
        if feed.followers <= 0 and self.feeds.get(feed.run_id) is feed:
            del self.feeds[feed.run_id]

    def followers(self, run_id: str) -> int:
        feed = self.feeds.get(run_id)
        return feed.followers if feed else 0

    async def _loop(self) -> None:
        while self.feeds:
            self._wake.clear()
            live = {run_id: feed for run_id, feed in self.feeds.items() if not feed.done}
            if live:
                cursors = {run_id: feed.cursor for run_id, feed in live.items()}
                known = {run_id: dict(feed.steps) for run_id, feed in live.items()}
                try:
                    progress, extras = await run_in_threadpool(self._read, cursors, known)
                except Exception:  # a DB blip: followers keep waiting, the next tick retries
                    log.exception("reading the progress of followed runs failed")
                    await asyncio.sleep(POLL_SECONDS * 4)
                    continue
                for feed in live.values():
                    self._apply(feed, progress, extras)
            try:
                await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)
            except TimeoutError:
                pass

    def _read(
        self, cursors: dict[str, int], known: dict[str, dict[int, str]]
    ) -> tuple[run_views_db.Progress, _StepExtras]:
        with self._sessions() as session:
            progress = run_views_db.progress_of(session, cursors)
            ended = [
                step
                for step in progress.steps
                if step.status in FINISHED_STEP
                and known[step.run_id].get(step.index) not in FINISHED_STEP
            ]
            tails = run_views_db.step_output_tails(session, [(s.run_id, s.index) for s in ended])
            return progress, _StepExtras(tails, _skip_reasons(session, ended))

    @staticmethod
    def _apply(feed: _Feed, progress: run_views_db.Progress, extras: _StepExtras) -> None:
        before = len(feed.messages)
        state = progress.runs.get(feed.run_id)
        if state is None:  # deleted under us
            feed.emit(END, {"status": None, "error": "the run no longer exists"})
            feed.done = True
        else:
            final = state.status in FINAL_STATUSES
            if state.status != feed.status and not final:
                feed.status = state.status
                feed.emit("run.status", {"status": state.status, "worker": state.worker,
                                         "error": state.error})  # fmt: skip
            # One tick may see several things happen (a short step is first seen finished, the
            # next one started, events written in between): send them in the order they
            # happened, not in the order they were read.
            happened = [
                entry
                for step in progress.steps
                if step.run_id == feed.run_id
                for entry in _step_messages(feed, state, step, extras)
            ]
            happened += [
                _Pending(event.at, event.kind, event.data, event.id, event.step_index)
                for event in progress.events
                if event.run_id == feed.run_id
            ]
            for entry in sorted(happened, key=lambda entry: entry.at):  # stable: steps first
                if entry.event_id is not None:
                    feed.cursor = entry.event_id
                feed.emit(entry.kind, entry.data, entry.event_id, entry.step_index, entry.at)
            # The final status comes after everything the run did (and after the events a
            # truncated read has not reached yet), right before the end.
            if final and not progress.events_truncated:
                feed.status = state.status
                feed.emit("run.status", {"status": state.status, "worker": state.worker,
                                         "error": state.error})  # fmt: skip
                feed.emit(END, {"status": state.status, "error": state.error,
                                "finished_at": state.finished_at})  # fmt: skip
                feed.done = True
        if len(feed.messages) != before:
            changed, feed.changed = feed.changed, asyncio.Event()
            changed.set()


@dataclass(frozen=True)
class _StepExtras:
    """What the poller reads only for steps that just ended: output tails and skip reasons."""

    tails: dict[tuple[str, int], str] = field(default_factory=dict)
    skip_reasons: dict[tuple[str, int], str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Pending:
    """A message of this tick, sent once the tick's messages are in the order they happened."""

    at: datetime
    kind: str
    data: JsonObject
    event_id: int | None = None
    step_index: int | None = None


def _skip_reasons(
    session: Session, ended: list[run_views_db.StepState]
) -> dict[tuple[str, int], str]:
    """Why each skipped step of `ended` was skipped (the runner keeps it in the step's result)."""
    reasons = {}
    for run_id in {step.run_id for step in ended if step.status == StepStatus.SKIPPED}:
        for row in run_steps_db.list_steps(session, run_id):
            if row.status == StepStatus.SKIPPED:
                reasons[(run_id, row.index)] = str((row.result or {}).get("skipped") or "")
    return reasons


def _shown_status(step: run_views_db.StepState, run: run_views_db.RunState) -> str:
    """The step's status as followers see it: a step the run's cancel ended is `cancelled`
    (the database records it `failed`, with the cancel's reason, at or after the cancel)."""
    if step.status != StepStatus.FAILED or run.status != RunStatus.CANCELLED:
        return step.status
    if step.error is not None and step.error == run.error:
        return RunStatus.CANCELLED.value
    if step.finished_at and run.finished_at and step.finished_at >= run.finished_at:
        return RunStatus.CANCELLED.value
    return step.status


def _step_messages(
    feed: _Feed, run: run_views_db.RunState, step: run_views_db.StepState, extras: _StepExtras
) -> list[_Pending]:
    """`step.started` / `step.finished` for what changed in a step since the last tick (a
    short step is first seen finished: both are sent; a skipped step never started)."""
    seen = feed.steps.get(step.index)
    if seen == step.status or seen in FINISHED_STEP:
        return []
    feed.steps[step.index] = step.status
    about = {"index": step.index, "step_id": step.step_id, "action_type": step.action_type}
    pending = []
    if seen is None and step.status != StepStatus.SKIPPED:
        pending.append(
            _Pending(
                step.started_at,
                "step.started",
                {**about, "started_at": step.started_at},
                None,
                step.index,
            )
        )
    if step.status in FINISHED_STEP:
        key = (step.run_id, step.index)
        data = {
            **about,
            "status": _shown_status(step, run),
            "exit_code": step.exit_code,
            "error": step.error,
            "finished_at": step.finished_at,
            "output_tail": extras.tails.get(key, ""),
        }
        if key in extras.skip_reasons:
            data["reason"] = extras.skip_reasons[key]
        pending.append(
            _Pending(step.finished_at or step.started_at, "step.finished", data, None, step.index)
        )
    return pending


def hub_of(request: Request, session_factory: SessionFactory) -> FollowHub:
    """The API process's hub (one per app)."""
    hub: FollowHub | None = getattr(request.app.state, "follow_hub", None)
    if hub is None:
        hub = request.app.state.follow_hub = FollowHub(session_factory)
    return hub


async def follow_run(
    request: Request, hub: FollowHub, run_id: str, after: int
) -> AsyncIterator[str]:
    """The Server-Sent Events of one follower of the run, from event id `after` on."""
    feed = hub.join(run_id)
    try:
        yield f"retry: 2000\n: following run {run_id}\n\n"
        position, last_sent = 0, time.monotonic()
        while True:
            changed = feed.changed
            while position < len(feed.messages):
                message = feed.messages[position]
                position += 1
                if message.visible_after(after):
                    yield message.text
                    last_sent = time.monotonic()
                if message.kind == END:
                    return
            if await request.is_disconnected():
                return
            quiet = time.monotonic() - last_sent
            if quiet >= HEARTBEAT_SECONDS:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
                continue
            wait = min(DISCONNECT_CHECK_SECONDS, HEARTBEAT_SECONDS - quiet)
            try:
                await asyncio.wait_for(changed.wait(), wait)
            except TimeoutError:
                pass
    finally:
        hub.leave(feed)
