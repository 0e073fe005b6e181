"""The sandboxes this engine makes: an agent session's, a command step's, and what both hide."""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import sysconfig
from pathlib import Path

from ade_tasks.agents.protected import DATA_DIR_NAME, GIT_DIR_NAME, engine_code, engine_data
from ade_tasks.settings import Settings
from ade_workers.sandbox import forward as _forward
from ade_workers.sandbox import helpers
from ade_workers.sandbox.host import require_sandbox
from ade_workers.sandbox.layout import Network, Sandbox, worker_python
from ade_workers.sandbox.scratch import scratch_root

FORWARDER = helpers.register(_forward.__file__)


@functools.cache
def engine_install() -> tuple[Path, ...]:
    """The engine's code: its packages, its virtualenv and the site-packages of the interpreter
    it runs on (fixed for the life of the process)."""
    paths = [Path(real) for real, _ in engine_code()]
    for scheme_key in ("purelib", "platlib"):
        paths.append(Path(sysconfig.get_paths()[scheme_key]).resolve())
        base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
        paths.append(Path(sysconfig.get_paths(vars=base)[scheme_key]).resolve())
    return tuple(dict.fromkeys(paths))


def engine_paths(settings: Settings, worktree: Path) -> tuple[Path, ...]:
    """Everything of the engine an agent's sandbox hides: its code, and its data (the data
    directory, the SQLite database, the API token file, every `.ade` below the worktree)."""
    paths = [*engine_install(), *(Path(real) for real, _ in engine_data(settings))]
    paths += data_directories_in(Path(os.path.realpath(worktree)))
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


def command_sandbox(
    settings: Settings,
    worktree: Path,
    *,
    network: Network,
    git_writable: bool,
    home: str | None,
    what: str,
) -> Sandbox | None:
    """The sandbox a command step runs in (None when `ADE_SANDBOX=off`), or SandboxUnavailable.

    Like an agent's, less what a rule author's own commands need: the git directories may be
    writable (`git fetch`), the network may be the host's, and `$HOME` is an empty capped
    directory of the sandbox's own. The engine's data is hidden where settings put it and as
    `.ade` at the worktree's top; the tree is not searched for more, as an agent session's is
    once, because a step would pay for it on every run. Each worktree gets one directory of
    this process's, `exchange_directory`, bound writable at its own path, for files the step
    and the engine hand each other (a JUnit report)."""
    if settings.sandbox == "off":
        return None
    root = Path(os.path.realpath(worktree))
    hidden = [*engine_install(), *(Path(real) for real, _ in engine_data(settings))]
    if (root / DATA_DIR_NAME).is_dir():
        hidden.append(root / DATA_DIR_NAME)
    return Sandbox(
        bwrap=require_sandbox(what),
        worktree=root,
        python=worker_python(),
        network=network,
        git_writable=git_writable,
        home=Path(home) if home and os.path.isabs(home) else None,
        read_write=(exchange_directory(root),),
        hidden=tuple(dict.fromkeys(path for path in hidden if path != Path("/"))),
    )


def exchange_directory(worktree: Path) -> Path:
    """This process's directory for files the command steps in `worktree` and the engine hand
    each other (removed with the process's scratch directory)."""
    key = os.path.realpath(worktree).encode()
    directory = scratch_root() / f"steps-{hashlib.sha256(key).hexdigest()[:16]}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory
