"""The worktree as tools see it: a path an agent names resolved inside it on real paths (so
`..`, absolute paths and symlinks, or chains of them, leading out are refused), the engine's
own data refused by name and left out of listings, and nothing under `.git` written."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ade_tasks.errors import PolicyViolationError
from ade_tasks.paths import resolve_inside
from ade_workers.agents.tools.tool import ToolContext, ToolError

BINARY_SNIFF = 8_192


def resolve(ctx: ToolContext, path: str, *, writes: bool = False) -> Path:
    """The real path inside the worktree an agent's relative `path` names, or a `ToolError`."""
    if not path:
        raise ToolError("path is empty; give a path relative to the worktree")
    if "\x00" in path:
        raise ToolError(f"path {path!r} contains a NUL byte; give a path relative to the worktree")
    if os.path.isabs(path):
        raise ToolError(f"path {path!r} is absolute; give a path relative to the worktree")
    refusal = ctx.guard.refusal(path, writes=writes)
    if refusal is not None:
        raise ToolError(f"refused: {refusal}")
    try:
        return resolve_inside(ctx.worktree, path)
    except PolicyViolationError as exc:
        raise ToolError(f"refused: {exc.message}") from None


def relative(ctx: ToolContext, real: Path) -> str:
    """`real` as the agent names it: relative to the worktree, with `/`."""
    rel = os.path.relpath(real, os.path.realpath(ctx.worktree))
    return Path(rel).as_posix()


def writable(ctx: ToolContext, path: str) -> tuple[Path, str]:
    """The real and the relative path of a file the agent may write (not a directory)."""
    # Git runs hooks and reads config from .git: a write there would reach beyond the worktree.
    real = resolve(ctx, path, writes=True)
    rel = relative(ctx, real)
    if real.is_dir():
        raise ToolError(f"{rel} is a directory")
    return real, rel


def is_binary(path: Path) -> bool:
    """Whether the file looks binary (a NUL byte near its start)."""
    with path.open("rb") as handle:
        return b"\x00" in handle.read(BINARY_SNIFF)


def hidden(ctx: ToolContext, full: str) -> bool:
    """Whether a listing leaves `full` out: engine data, by its name or where it leads."""
    return ctx.guard.hides(full) or ctx.guard.hides(os.path.realpath(full))


def walk_files(ctx: ToolContext, start: Path) -> Iterator[tuple[str, Path]]:
    """(relative path, real path) of every file under `start`, skipping .git, the engine's
    data and escapes."""
    real_root = os.path.realpath(ctx.worktree)
    for dirpath, dirnames, filenames in os.walk(start):  # never follows directory symlinks
        dirnames[:] = sorted(
            d for d in dirnames if d != ".git" and not hidden(ctx, os.path.join(dirpath, d))
        )
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            real = os.path.realpath(full)
            if os.path.commonpath([real_root, real]) != real_root or not os.path.isfile(real):
                continue  # a symlink leading out of the worktree, or to nothing
            if hidden(ctx, full):
                continue  # the engine's data, or a symlink to it
            yield Path(os.path.relpath(full, real_root)).as_posix(), Path(real)
