"""The one clock of the system of record: timezone-aware UTC, as every table stores it.

The system of record is the database, so a process whose clock decides what others see (a beat:
which slots are due, and the times of its claims and runs) follows the database's clock instead
of its machine's: `ade_tasks.db.clock` reads it and calls `follow`, and `utcnow()` is from then on
the database's time as read plus the monotonic time elapsed since. Reading on the monotonic clock
keeps a step of this machine's clock (a late NTP correction) out of it between two readings.
Processes that do not follow (and every process on SQLite, whose clock is this machine's) use
this machine's clock.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

#: The database's time minus `time.monotonic()`, in seconds; None: this machine's clock.
_shift: float | None = None


def utcnow() -> datetime:
    """Now, timezone-aware UTC (the database's time in a process that follows it)."""
    shift = _shift
    if shift is None:
        return datetime.now(UTC)
    return datetime.fromtimestamp(time.monotonic() + shift, UTC)


def follow(at: datetime, monotonic: float) -> None:
    """From now on `utcnow()` is `at` plus the seconds `time.monotonic()` has run since
    `monotonic` (the instant `at` was true)."""
    global _shift
    if at.tzinfo is None:
        raise ValueError(f"naive datetime {at!r}; pass a timezone-aware UTC datetime")
    _shift = at.timestamp() - monotonic


def unfollow() -> None:
    """Back to this machine's clock."""
    global _shift
    _shift = None
