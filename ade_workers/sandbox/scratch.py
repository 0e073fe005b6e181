"""Where a session's private directories live, and how a dead worker's are found and removed.

Each worker process makes its session directories (a CLI's private home, its socket directory,
the engine's helper copies) under one directory of its own in the temp directory,
`ade-scratch-<pid>-<start>`, named by the process's pid and its start time (from /proc, so a
reused pid is another name). The session removes its own directories when it ends; a worker
killed mid-session (SIGKILL, the OOM killer) leaves them behind, and `sweep` removes every
scratch directory whose process is gone. Workers sweep when they are ready and once a minute
(`ade_workers.celery.housekeeper`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

PREFIX = "ade-scratch-"
_lock = threading.Lock()
_root: dict[int, Path] = {}


def process_start(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot (None: no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def scratch_root() -> Path:
    """This process's scratch directory (0711: an agent user may pass through to the session
    directories handed to it, never list them)."""
    pid = os.getpid()
    with _lock:
        root = _root.get(pid)
        if root is None or not root.is_dir():
            root = Path(tempfile.gettempdir()) / f"{PREFIX}{pid}-{process_start(pid)}"
            root.mkdir(mode=0o711, exist_ok=True)
            root.chmod(0o711)
            _root[pid] = root
        return root


def make_directory(prefix: str, base: Path | None = None) -> Path:
    """A fresh private directory (0700) under `base`, or under this process's scratch root."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base or scratch_root()))


def sweep(directory: Path | None = None) -> list[Path]:
    """Remove the scratch directories in `directory` (the temp directory) whose process is
    gone; the ones removed."""
    removed: list[Path] = []
    parent = directory or Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if not entry.name.startswith(PREFIX) or entry.is_symlink():
                continue
            pid, _, start = entry.name.removeprefix(PREFIX).partition("-")
            if not pid.isdigit() or process_start(int(pid)) == start:
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed
