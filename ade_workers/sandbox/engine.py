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
    it runs on, those that exist (fixed for the life of the process)."""
    paths = [Path(real) for real, _ in engine_code()]
    for scheme_key in ("purelib", "platlib"):
        paths.append(Path(sysconfig.get_paths()[scheme_key]).resolve())
        base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
        paths.append(Path(sysconfig.get_paths(vars=base)[scheme_key]).resolve())
    return tuple(path for path in dict.fromkeys(paths) if path.exists())


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
    root = Path(os.path.realpath(worktree))
    identity = os.stat(root)
    return Sandbox(
        bwrap=require_sandbox(what),
        worktree=root,
        python=worker_python(),
        forwarder=FORWARDER.installed(),
        hidden=engine_paths(settings, worktree),
        worktree_identity=(identity.st_dev, identity.st_ino),
    )


def command_sandbox(
    settings: Settings,
    worktree: Path,
    *,
    network: Network,
    untrusted: bool,
    home: str | None,
    what: str,
) -> Sandbox | None:
    """The sandbox a command step runs in (None when `ADE_SANDBOX=off`), or SandboxUnavailable.

    A rule author's own command (`untrusted=False`) gets what it needs beyond an agent's: the
    git directories writable (`git fetch`), and the engine's code (its packages, virtualenv and
    interpreter's site-packages) read-only, so the `make dev` default project, which is the
    engine's checkout, runs its tests with that virtualenv. A command that may run code an
    agent wrote (`untrusted`) gets neither: git read-only (the engine runs git there later) and
    the engine's code hidden, as in an agent's sandbox. Either way the engine's data is hidden
    where settings put it and as `.ade` at the worktree's top (the tree is not searched for
    more, as an agent session's is once: a step would pay for it on every run), and `$HOME` is
    an empty capped directory of the sandbox's own. Each worktree gets one directory of this
    process's, `exchange_directory`, bound writable at its own path, for files the step and the
    engine hand each other (a JUnit report)."""
    if settings.sandbox == "off":
        return None
    root = Path(os.path.realpath(worktree))
    identity = os.stat(root)
    hidden = [*_engine_data_paths(settings)]
    if (root / DATA_DIR_NAME).is_dir():
        hidden.append(root / DATA_DIR_NAME)
    code = list(engine_install())
    return Sandbox(
        bwrap=require_sandbox(what),
        worktree=root,
        python=worker_python(),
        network=network,
        git_writable=not untrusted,
        home=Path(home) if home and os.path.isabs(home) else None,
        read_write=(exchange_directory(root),),
        read_only=() if untrusted else tuple(code),
        hidden=tuple(dict.fromkeys([*hidden, *(code if untrusted else [])])),
        worktree_identity=(identity.st_dev, identity.st_ino),
    )


_data_for: dict[int, tuple[Settings, tuple[Path, ...]]] = {}


def _engine_data_paths(settings: Settings) -> tuple[Path, ...]:
    """The engine's data for these settings (resolved once per settings object: a step would
    otherwise pay a dozen `realpath`s for it)."""
    known = _data_for.get(id(settings))
    if known is None or known[0] is not settings:
        paths = [Path(real) for real, _ in engine_data(settings)]
        known = (settings, tuple(path for path in paths if path != Path("/")))
        if len(_data_for) > 16:  # settings objects of tests and tools come and go
            _data_for.clear()
        _data_for[id(settings)] = known
    return known[1]


def exchange_directory(worktree: Path) -> Path:
    """This process's directory for files the command steps in `worktree` and the engine hand
    each other (removed with the process's scratch directory)."""
    key = os.path.realpath(worktree).encode()
    directory = scratch_root() / f"steps-{hashlib.sha256(key).hexdigest()[:16]}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory
