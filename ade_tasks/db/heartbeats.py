"""Query functions for heartbeats: beats, GitHub pollers and relay drains saying they are alive.

A heartbeat is one row per process, written in place, so a cluster holds as many rows as it runs
such processes. Each write also drops the rows of processes not seen for `FORGET_AFTER`, so a
cluster whose beats come and go never grows the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ade_tasks.db.schema import HeartbeatRow

FORGET_AFTER = timedelta(days=1)
#: A heartbeat late by more than this beyond its own interval means its process is gone (a
#: busy database or a long tick delays one a little; a dead process never writes again).
GRACE = timedelta(seconds=15)
BEAT, POLLER, RELAY_DRAIN = "beat", "poller", "relay-drain"


@dataclass(frozen=True)
class Heartbeat:
    """A process's newest sign of life: which process, of what kind, when, and how soon the
    next one is due. A poller's `repos` are those it polls; None: the `repo` filters of the
    enabled github.* triggers (read again every cycle). A relay drain's `relay` is the relay it
    drains and `error` why its last drain failed (None: it drained the relay to its end). A
    beat's `clock_offset` is how many seconds its machine's clock is ahead of the database's
    (negative: behind; None: not read yet, `ade_tasks.db.clock`)."""

    process_id: str
    kind: str
    seen_at: datetime
    every: float
    repos: tuple[str, ...] | None = None
    relay: str | None = None
    error: str | None = None
    clock_offset: float | None = None

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
    detail: dict[str, Any] | None = None,
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
        )
        for row in rows
    ]
