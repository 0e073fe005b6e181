"""Query functions for heartbeats: beats, GitHub pollers and relay drains saying they are alive.

A heartbeat is one row per process, written in place, so a cluster holds as many rows as it runs
such processes. Each write also drops the rows of processes not seen for `FORGET_AFTER`, so a
cluster whose beats come and go never grows the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ade_tasks.db.schema import HeartbeatRow
from ade_tasks.json_document import JsonObject

FORGET_AFTER = timedelta(days=1)
#: A heartbeat late by more than this beyond its own interval means its process is gone (a
#: busy database or a long tick delays one a little; a dead process never writes again).
GRACE = timedelta(seconds=15)
BEAT, POLLER, RELAY_DRAIN = "beat", "poller", "relay-drain"


@dataclass(frozen=True)
class PollOutcome:
    """A poller's latest polls of one repository: when one last succeeded, when one last failed
    and why (a poll that GitHub answered counts as a success, whatever it listed)."""

    ok_at: datetime | None = None
    failed_at: datetime | None = None
    error: str | None = None

    @property
    def failing(self) -> bool:
        """Did the latest poll fail?"""
        return self.failed_at is not None and (self.ok_at is None or self.failed_at > self.ok_at)

    def succeeded(self, at: datetime) -> PollOutcome:
        """This outcome after a poll that succeeded `at`."""
        return PollOutcome(at, self.failed_at, self.error)

    def failed(self, at: datetime, error: str) -> PollOutcome:
        """This outcome after a poll that failed `at` with `error`."""
        return PollOutcome(self.ok_at, at, error)

    def as_detail(self) -> dict[str, str | None]:
        """The JSON form a heartbeat's `detail` carries."""
        return {
            "ok_at": self.ok_at.isoformat() if self.ok_at else None,
            "failed_at": self.failed_at.isoformat() if self.failed_at else None,
            "error": self.error,
        }

    @classmethod
    def from_detail(cls, detail: JsonObject) -> PollOutcome:
        """The outcome `as_detail` wrote."""
        ok_at, failed_at = detail.get("ok_at"), detail.get("failed_at")
        return cls(
            datetime.fromisoformat(ok_at) if ok_at else None,
            datetime.fromisoformat(failed_at) if failed_at else None,
            detail.get("error"),
        )


@dataclass(frozen=True)
class Heartbeat:
    """A process's newest sign of life: which process, of what kind, when, and how soon the
    next one is due. A poller's `repos` are those it polls; None: the `repo` filters of the
    enabled github.* triggers (read again every cycle). A relay drain's `relay` is the relay it
    drains and `error` why its last drain failed (None: it drained the relay to its end). A
    beat's `clock_offset` is how many seconds its machine's clock is ahead of the database's
    (negative: behind; None: not read yet, `ade_tasks.db.clock`). A poller's `polls` are its
    latest polls per repository it polled (lower-cased `owner/name`)."""

    process_id: str
    kind: str
    seen_at: datetime
    every: float
    repos: tuple[str, ...] | None = None
    relay: str | None = None
    error: str | None = None
    clock_offset: float | None = None
    polls: Mapping[str, PollOutcome] = field(default_factory=dict)

    def alive(self, now: datetime) -> bool:
        """Did the process write its heartbeat within its interval (and a grace) of `now`?"""
        return now - self.seen_at <= timedelta(seconds=self.every) + GRACE


def record(
    session: Session,
    process_id: str,
    kind: str,
    *,
    every: float,
    now: datetime,
    detail: JsonObject | None = None,
) -> None:
    """Say that `process_id` is alive now and will say so again within `every` seconds."""
    row = session.get(HeartbeatRow, process_id)
    if row is None:
        session.add(
            HeartbeatRow(
                process_id=process_id,
                kind=kind,
                started_at=now,
                seen_at=now,
                every_seconds=every,
                detail=detail or {},
            )
        )
    else:
        row.seen_at, row.every_seconds, row.detail = now, every, detail or {}
    session.execute(delete(HeartbeatRow).where(HeartbeatRow.seen_at < now - FORGET_AFTER))


def recent(session: Session) -> Sequence[Heartbeat]:
    """Every heartbeat the database holds (alive or not: `Heartbeat.alive` decides)."""
    rows = session.scalars(select(HeartbeatRow).order_by(HeartbeatRow.process_id))
    return [
        Heartbeat(
            process_id=row.process_id,
            kind=row.kind,
            seen_at=row.seen_at,
            every=row.every_seconds,
            repos=tuple(row.detail["repos"]) if row.detail.get("repos") is not None else None,
            relay=row.detail.get("relay"),
            error=row.detail.get("error"),
            clock_offset=row.detail.get("clock_offset"),
            polls={
                repo: PollOutcome.from_detail(found)
                for repo, found in (row.detail.get("polls") or {}).items()
            },
        )
        for row in rows
    ]
