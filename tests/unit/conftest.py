"""Unit fixtures: an SQLite database file per test, migrated, and an in-memory sender."""

from __future__ import annotations

from pathlib import Path

import pytest

from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.dispatch import InMemorySender
from ade_tasks.rules.sync import sync_rules_dir
from tests.conftest import write_rule


@pytest.fixture
def session_factory(tmp_path: Path) -> SessionFactory:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'ade.db'}")
    upgrade(engine)
    return create_session_factory(engine)


@pytest.fixture
def sender() -> InMemorySender:
    return InMemorySender()


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    return tmp_path / "rules"


def add_rule(session_factory: SessionFactory, rules_dir: Path, name: str, text: str) -> None:
    write_rule(rules_dir, f"{name}.yaml", text)
    loaded, _ = sync_rules_dir(session_factory, rules_dir)
    assert not loaded.problems, loaded.problems
