"""The sandbox an agent session of this engine gets: what it hides and how it is made."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from ade_tasks.agents.protected import DATA_DIR_NAME, GIT_DIR_NAME, ProtectedPaths, engine_code
from ade_tasks.settings import Settings
from ade_workers.sandbox import forward as _forward
from ade_workers.sandbox import helpers
from ade_workers.sandbox.host import require_sandbox
from ade_workers.sandbox.layout import Sandbox, worker_python

FORWARDER = helpers.register(_forward.__file__)


def engine_paths(settings: Settings, worktree: Path) -> tuple[Path, ...]:
    """Everything of the engine a sandbox hides: its packages, its virtualenv, the site-packages
    of the interpreter it runs on, and its data (the data directory, the SQLite database, the
    API token file)."""
    paths = [Path(real) for real, _ in engine_code()]  # its packages and virtualenv
    for scheme_key in ("purelib", "platlib"):
        paths.append(Path(sysconfig.get_paths()[scheme_key]).resolve())
        base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
        paths.append(Path(sysconfig.get_paths(vars=base)[scheme_key]).resolve())
    protected = ProtectedPaths.from_settings(settings, worktree)
    paths += [Path(real) for real, _ in protected.engine_data]
    paths += data_directories_in(Path(protected.worktree))
    return tuple(dict.fromkeys(path for path in paths if path != Path("/")))


def data_directories_in(worktree: Path) -> list[Path]:
    """Every `.ade` directory below the worktree (engine data wherever it is: a dev stack
    started there), found once when the session's sandbox is made; `.git` is not searched."""
    found: list[Path] = []
    for directory, subdirs, _ in os.walk(worktree):
        if DATA_DIR_NAME in subdirs:
            found.append(Path(directory) / DATA_DIR_NAME)
        subdirs[:] = [d for d in subdirs if d not in (GIT_DIR_NAME, DATA_DIR_NAME)]
    return found


def agent_sandbox(settings: Settings, worktree: Path, what: str) -> Sandbox | None:
    """The base sandbox for an agent session in `worktree` (None when `ADE_SANDBOX=off`), or
    SandboxUnavailable when one is required and the host cannot make it."""
    if settings.sandbox == "off":
        return None
    return Sandbox(
        bwrap=require_sandbox(what),
        worktree=Path(os.path.realpath(worktree)),
        python=worker_python(),
        forwarder=FORWARDER.installed(),
        hidden=engine_paths(settings, worktree),
    )
