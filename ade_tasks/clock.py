"""The one clock of the system of record: timezone-aware UTC, as every table stores it."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, timezone-aware UTC."""
    return datetime.now(UTC)
