"""The checkout's own files: what tests may copy from the repository.

A developer's own rule in `config/rules/` (where the README says rules go) is theirs, not the
project's, so a test that starts from the shipped config copies only the files git tracks
(`git ls-files`). Their working-tree content is copied, so an edit to a shipped example is
tested before it is staged; a tracked file deleted from the working tree is left out.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def tracked_files(directory: Path) -> list[Path]:
    """The files under `directory` (in a git checkout) that git tracks, in name order."""
    listed = subprocess.run(
        ["git", "-C", str(directory), "ls-files", "-z"], capture_output=True, check=False
    )
    if listed.returncode != 0:
        raise RuntimeError(
            f"git ls-files failed in {directory} "
            f"({listed.stderr.decode(errors='replace').strip()}); the tests copy only the files "
            "the repository tracks, so run them from a git checkout"
        )
    paths = [directory / name for name in listed.stdout.decode().split("\0") if name]
    return sorted(path for path in paths if path.is_file())


def copy_tracked(directory: Path, destination: Path) -> Path:
    """Copy the tracked files under `directory` to `destination`, keeping their layout."""
    for path in tracked_files(directory):
        target = destination / path.relative_to(directory)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return destination
