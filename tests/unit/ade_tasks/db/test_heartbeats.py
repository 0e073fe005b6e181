"""Heartbeats: one row per beat or poller, written in place, forgotten a day after the last."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db.heartbeats import BEAT, POLLER
from tests.git_project import migrated_sqlite

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_a_heartbeat_is_one_row_per_process_updated_in_place(tmp_path: Path) -> None:
    sessions = migrated_sqlite(tmp_path)
    # given a beat that beat twice and a poller of one repository
    with sessions.begin() as session:
        heartbeats_db.record(session, "b1", BEAT, every=10, now=NOW - timedelta(seconds=20))
        heartbeats_db.record(session, "p1", POLLER, every=60, now=NOW, detail={"repos": ["a/b"]})
    with sessions.begin() as session:
        heartbeats_db.record(session, "b1", BEAT, every=10, now=NOW)

    with sessions() as session:
        beats = {h.process_id: h for h in heartbeats_db.recent(session)}

    # then each process has one heartbeat, the newest, and says what it polls
    assert beats["b1"].seen_at == NOW and beats["b1"].alive(NOW)
    assert not beats["b1"].alive(NOW + timedelta(seconds=26))
    assert beats["p1"].repos == ("a/b",)


def test_a_process_gone_for_a_day_is_forgotten_at_the_next_heartbeat(tmp_path: Path) -> None:
    sessions = migrated_sqlite(tmp_path)
    with sessions.begin() as session:
        heartbeats_db.record(session, "old", BEAT, every=10, now=NOW - timedelta(days=2))
    with sessions.begin() as session:
        heartbeats_db.record(session, "new", BEAT, every=10, now=NOW)

    with sessions() as session:
        assert [h.process_id for h in heartbeats_db.recent(session)] == ["new"]
