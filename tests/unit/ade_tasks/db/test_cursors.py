"""Ingress cursors: absent until written, then replaced in place, one per source."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from ade_tasks.db import cursors as cursors_db
from tests.git_project import migrated_sqlite

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POLL = "github-poll:acme/api"


def test_a_cursor_is_absent_until_written_then_replaced_in_place(tmp_path: Path) -> None:
    sessions = migrated_sqlite(tmp_path)
    with sessions.begin() as session:
        assert cursors_db.read(session, POLL) is None
        cursors_db.write(session, POLL, "2026-12-01T11:00:00Z", by="b1", now=NOW)
        cursors_db.write(session, "relay:x", "41", by="b1", now=NOW)
    later = NOW + timedelta(seconds=30)
    with sessions.begin() as session:
        cursors_db.write(session, POLL, "2026-12-01T12:00:00Z", by="b2", now=later)
    with sessions.begin() as session:
        assert cursors_db.read(session, POLL) == "2026-12-01T12:00:00Z"
        assert cursors_db.read(session, "relay:x") == "41"
