"""A real git repository as a rule's project, a runner configured for it, and a migrated SQLite
database (plain functions, so unit and integration fixtures can share them)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.settings import Settings
from ade_workers.actions.registry import registry
from ade_workers.engine.runner_config import RunnerConfig

SECRET = "s3cr3t-'value'\\x"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True
    ).stdout


def make_git_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one commit on `main`, isolated from the user's git config."""
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


def make_runner_config(project: Path, tmp_path: Path) -> RunnerConfig:
    """A runner for `project` with lanes under tmp_path and the secret DEPLOY_TOKEN set."""
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


def migrated_sqlite(tmp_path: Path) -> SessionFactory:
    """Sessions on a fresh, migrated SQLite database file under `tmp_path`."""
    engine = create_db_engine(f"sqlite:///{tmp_path / 'ade.db'}")
    upgrade(engine)
    return create_session_factory(engine)
