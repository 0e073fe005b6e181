"""Pages of the run history (ade_tasks.db.run_views.list_runs) on SQLite, the embedded mode: the
cursor's row comparison keeps runs queued at the same instant apart, and an id prefix finds what
`LIKE 'prefix%'` would, across the hyphens of a UUID."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ade_tasks.db import run_views
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunRow
from tests.git_project import migrated_sqlite

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def _runs(sessions: SessionFactory, queued: list[datetime]) -> list[str]:
    ids = sorted(str(uuid.uuid4()) for _ in queued)
    with sessions.begin() as session:
        session.add_all(
            RunRow(id=run_id, rule_id="r", rule_version=1, trigger_type="manual", trigger={},
                   idempotency_key=run_id, status="succeeded", billing_code="auto:r", usage={},
                   queue="ade.builtin", queued_at=at)
            for run_id, at in zip(ids, queued, strict=True)
        )  # fmt: skip
    return ids


def test_pages_keep_runs_queued_at_the_same_instant_in_id_order(tmp_path: Path) -> None:
    # Given seven runs, five of them queued at the same instant
    sessions = migrated_sqlite(tmp_path)
    queued = [NOW] * 5 + [NOW - timedelta(seconds=1), NOW + timedelta(seconds=1)]
    ids = _runs(sessions, queued)
    newest_first = [i for _, i in sorted(zip(queued, ids, strict=True), reverse=True)]
    # When the history is read two runs a page, following the cursors
    seen: list[str] = []
    cursor: str | None = None
    with sessions() as session:
        for _ in range(10):
            page, cursor = run_views.list_runs(session, run_views.RunFilter(), limit=2,
                                               cursor=cursor)  # fmt: skip
            seen += [row.id for row in page]
            if cursor is None:
                break
    # Then every run comes once, newest first and by id among equals
    assert seen == newest_first


def test_an_id_prefix_finds_the_runs_it_starts_across_the_hyphens(tmp_path: Path) -> None:
    # Given a few runs
    sessions = migrated_sqlite(tmp_path)
    ids = _runs(sessions, [NOW - timedelta(minutes=n) for n in range(6)])
    with sessions() as session:
        for run_id in ids:
            for length in (1, 8, 9, 13, 36):  # up to, across and after the first hyphens
                prefix = run_id[:length]
                # When the history is filtered by the prefix
                page, _ = run_views.list_runs(session, run_views.RunFilter(id_prefix=prefix))
                # Then exactly the runs it starts come back
                assert {row.id for row in page} == {i for i in ids if i.startswith(prefix)}
        assert run_views.list_runs(session, run_views.RunFilter(id_prefix="zz"))[0] == []
