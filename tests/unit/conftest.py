"""Unit fixtures: an SQLite database file per test, migrated, an in-memory sender, and a git
repository as the project with a runner configured for it (test modules may override these)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ade_tasks.db.engine import SessionFactory
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner_config import RunnerConfig
from tests.conftest import write_rule
from tests.git_project import make_git_project, make_runner_config, migrated_sqlite


@pytest.fixture
def session_factory(tmp_path: Path) -> SessionFactory:
    return migrated_sqlite(tmp_path)


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


def schedule_rule(
    session_factory: SessionFactory, rules_dir: Path, rule_id: str, cron: str, enabled: bool = True
) -> None:
    """(Re)write and sync a one-trigger schedule rule."""
    add_rule(
        session_factory,
        rules_dir,
        rule_id,
        f"id: {rule_id}\nenabled: {str(enabled).lower()}\n"
        f"triggers: [{{type: schedule, cron: '{cron}'}}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n",
    )


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one commit on `main`."""
    return make_git_project(tmp_path, monkeypatch)


@pytest.fixture
def config(project: Path, tmp_path: Path) -> RunnerConfig:
    """A runner for `project`, lanes under tmp_path, and the secret DEPLOY_TOKEN."""
    return make_runner_config(project, tmp_path)
