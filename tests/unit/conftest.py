"""Unit fixtures: an SQLite database file per test, migrated, an in-memory sender, and a git
repository as the project with a runner configured for it (test modules may override these)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.dispatch import InMemorySender
from ade_tasks.rules.sync import sync_rules_dir
from ade_tasks.settings import Settings
from ade_workers.actions import registry
from ade_workers.runner import RunnerConfig
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


SECRET = "s3cr3t-'value'\\x"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one commit on `main`."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test")
    git(root, "config", "user.email", "test@example.com")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.fixture
def config(project: Path, tmp_path: Path) -> RunnerConfig:
    settings = Settings(
        projects={"default": project},
        lanes_root=tmp_path / "lanes",
        heartbeat_seconds=0.2,
        kill_grace_seconds=0.5,
    )
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "DEPLOY_TOKEN": SECRET,
    }
    return RunnerConfig(settings, registry(), env)
