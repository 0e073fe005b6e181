"""Path containment: a path a rule or trigger supplies must stay inside its root.

Containment is decided on real paths (symlinks resolved) with `os.path.commonpath`, never by
string prefix, so `/lanes/ab` is not inside `/lanes/a` and a symlink out of the root is caught.
"""

from __future__ import annotations

import os
from pathlib import Path

from ade_tasks.errors import PolicyViolationError


def resolve_inside(root: Path, relative: str, *, what: str = "path") -> Path:
    """The real path of `relative` under `root`; PolicyViolationError if it leaves the root."""
    real_root = os.path.realpath(root)
    candidate = os.path.realpath(os.path.join(real_root, relative))
    if os.path.commonpath([real_root, candidate]) != real_root:
        raise PolicyViolationError(
            f"{what} {relative!r} resolves to {candidate}, outside {real_root}; "
            "use a path inside it"
        )
    return Path(candidate)
