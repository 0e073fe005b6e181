"""Query functions for ingress cursors: how far a polled or relayed source has been read.

One row per source (`github-poll:owner/name`, `relay:<url>`), replaced in place. The value is the
source's own format (an ISO instant, an event id); callers parse it. Only the process holding a
source's claim writes its cursor, in the transaction that stores the events the cursor covers.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from ade_tasks.db.schema import IngressCursorRow


def read(session: Session, source: str) -> str | None:
    """The stored cursor of `source`, or None when it was never read."""
    row = session.get(IngressCursorRow, source)
    return None if row is None else row.value


def write(session: Session, source: str, value: str, *, by: str, now: datetime) -> None:
    """Store `value` as the cursor of `source`, written by process `by` at `now`."""
    row = session.get(IngressCursorRow, source)
    if row is None:
        session.add(IngressCursorRow(source=source, value=value, updated_at=now, updated_by=by))
    else:
        row.value, row.updated_at, row.updated_by = value, now, by
