"""Engine-owned, hash-checked copies of the programs a session runs on the engine's behalf.

Claude Code runs the engine's PreToolUse hook as a command of its own, and a sandbox runs the
forwarder before its command. Were they run from the engine's source tree, an agent whose
worktree is that tree (the `make dev` default project is the checkout) could rewrite them with
one allowed edit, and every later session would run the agent's program instead of the
engine's. So a helper's bytes are read once, when the worker imports the module that registers
it, and each use gets a read-only copy in a directory of this process's, written from those
bytes and checked against their SHA-256 before it is handed out (rewritten when it differs).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from ade_workers.sandbox.scratch import make_directory

_lock = threading.Lock()
_directory: list[Path] = []


@dataclass(frozen=True)
class Helper:
    """A program's name and the bytes the engine started with."""

    name: str
    content: bytes

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.content).hexdigest()

    def installed(self) -> Path:
        """The path of a read-only copy with exactly the engine's bytes."""
        path = _helpers_directory() / self.name
        with _lock:
            if not _matches(path, self.digest):
                staging = path.with_name(f".{self.name}.new")
                with contextlib.suppress(FileNotFoundError):
                    staging.unlink()
                fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(self.content)
                os.replace(staging, path)
            if not _matches(path, self.digest):
                raise OSError(f"the engine's copy of {self.name} at {path} does not hold its bytes")
        return path


def register(source: str | os.PathLike[str]) -> Helper:
    """A helper with `source`'s bytes as they are now (call at import time)."""
    path = Path(source)
    return Helper(path.name, path.read_bytes())


def _matches(path: Path, digest: str) -> bool:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == digest
    except OSError:
        return False


def _helpers_directory() -> Path:
    """This process's helpers directory (0755: an agent user runs the copies; only the worker
    writes), made on first use and removed at exit."""
    with _lock:
        if not _directory or not _directory[0].is_dir():
            directory = make_directory("helpers-")
            directory.chmod(0o755)
            _directory[:] = [directory]
            atexit.register(shutil.rmtree, directory, True)
        return _directory[0]


def _forget_after_fork() -> None:  # a forked worker child makes its own directory
    _directory.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
