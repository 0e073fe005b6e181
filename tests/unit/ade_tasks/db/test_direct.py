"""The direct path (`ade_tasks.db.direct`) is PostgreSQL's alone: on SQLite the run path's
writes stay on sessions, and a claim and an outcome there still hold."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from ade_tasks.clock import utcnow
from ade_tasks.db import runs as runs_db
from ade_tasks.db.direct import Rows, direct_statements, durable_writes
from ade_tasks.db.engine import SessionFactory, autocommit
from ade_tasks.db.retry import retrying
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from tests.unit.conftest import add_rule

RULE = """
id: plain
triggers: [{type: manual}]
execution: {kind: built-in, actions: [{id: only, type: run-command, command: "true"}]}
"""


def test_sqlite_writes_go_through_sessions(session_factory: SessionFactory, tmp_path: Path) -> None:
    add_rule(session_factory, tmp_path / "rules", "plain", RULE)
    run_id = dispatch(session_factory, InMemorySender(), "plain", TriggerEvent.manual()).run.id
    writes = durable_writes(session_factory)
    lease = utcnow() + timedelta(minutes=1)

    claimed = retrying(writes, lambda db: runs_db.claim_run(db, run_id, "w1", lease))
    ended = retrying(writes, lambda db: runs_db.finish_run(db, run_id, "w1", RunStatus.SUCCEEDED))

    assert direct_statements(session_factory) is None
    assert writes is autocommit(session_factory)
    assert claimed is not None and claimed.id == run_id and ended
    with session_factory() as session:
        assert runs_db.get_run(session, run_id).status == RunStatus.SUCCEEDED


def test_rows_read_like_a_result() -> None:
    assert Rows([("a", 1)]).first() == ("a", 1)
    assert Rows([]).first() is None
    assert Rows([("a",)]).scalar_one_or_none() == "a"
    assert Rows([]).scalar_one_or_none() is None
