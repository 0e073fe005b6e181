"""`tests/unit/ade_tasks/runs/test_dispatch_seen.py` on PostgreSQL: there the one statement casts each of its
parameters to its column's type, and autocommit sessions send no BEGIN."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ade_tasks.db.engine import SessionFactory, autocommit, create_db_engine, create_session_factory
from ade_tasks.testing import InMemorySender
from tests.unit.ade_tasks.runs.test_dispatch_seen import (  # noqa: F401 (the tests and their fixture, run here)
    fired,
    test_a_rule_deleted_since_is_not_found,
    test_a_rule_disabled_since_refuses_its_events_and_still_runs_manually,
    test_a_rule_fired_before_costs_one_statement_per_trigger,
    test_a_rule_paused_since_refuses_its_events_with_the_note,
    test_an_edit_since_the_last_trigger_is_what_the_next_run_records,
)


@pytest.fixture
def session_factory(database_url: str) -> Iterator[SessionFactory]:
    engine = create_db_engine(database_url)
    yield autocommit(create_session_factory(engine))
    engine.dispose()


@pytest.fixture
def sender() -> InMemorySender:
    return InMemorySender()


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    return tmp_path / "rules"
