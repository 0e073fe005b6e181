"""Lanes: a git worktree on its own branch, so an automation changes code beside the main checkout.

Everything here is plain `git` through subprocess. A lane's display name, base ref and base commit
are kept in the repository's config under `branch.<branch>.ade*`, which `git branch -D` removes
together with the branch, so no other bookkeeping can go stale.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import subprocess
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ade_tasks.errors import AdeError
from ade_tasks.globs import path_matches
from ade_tasks.paths import resolve_inside

MAX_COUNTER = 9  # "name (#2)" .. "name (#9)", then a UTC timestamp suffix
SLUG_MAX = 64  # characters of the slug before a collision suffix; keeps paths and refs short
# Exactly `git rev-parse --local-env-vars`: what git itself clears before entering another
# repository. A hook running us would otherwise point every call at the hook's repository; the
# rest (GIT_SSH_COMMAND, GIT_ASKPASS, ...) is kept because pushes may need it.
_REPO_ENV = frozenset(
    "GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_CONFIG GIT_CONFIG_PARAMETERS GIT_CONFIG_COUNT "
    "GIT_OBJECT_DIRECTORY GIT_DIR GIT_WORK_TREE GIT_IMPLICIT_WORK_TREE GIT_GRAFT_FILE "
    "GIT_INDEX_FILE GIT_NO_REPLACE_OBJECTS GIT_REPLACE_REF_BASE GIT_PREFIX "
    "GIT_INTERNAL_SUPER_PREFIX GIT_SHALLOW_FILE GIT_COMMON_DIR".split()
)
_OID = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


class LaneError(AdeError):
    """A lane (git worktree) operation failed."""


@dataclass(frozen=True)
class Lane:
    """A worktree under the lanes root, checked out on its own branch."""

    name: str
    branch: str
    path: Path
    base_ref: str
    base_sha: str


@dataclass(frozen=True)
class DeleteResult:
    """What `delete_lane` removed in this call; `note` says it in words."""

    removed_worktree: bool
    removed_branch: bool
    removed_remote: bool
    note: str


@dataclass(frozen=True)
class _Worktree:
    path: Path
    branch: str | None


def _run(repo: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    # A directory an agent could write into never passes for a bare repository (its config
    # would run commands as the worker): the engine's git finds only work trees.
    env.update(GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="safe.bareRepository")
    env["GIT_CONFIG_VALUE_0"] = "explicit"
    argv = ["git", "-C", str(repo), *args]
    try:
        return subprocess.run(
            argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise LaneError(f"`{shlex.join(argv)}` timed out after {timeout:g}s") from None
    except FileNotFoundError:
        raise LaneError("git is not installed or not on PATH; install git >= 2.38") from None


def _decode(raw: bytes) -> str:
    # Paths are bytes to git; surrogateescape keeps a non-UTF-8 name round-trippable.
    return raw.decode("utf-8", "surrogateescape")


def _failure(result: subprocess.CompletedProcess[bytes]) -> LaneError:
    tail = _decode(result.stderr).strip().splitlines()[-5:]
    detail = " | ".join(tail) or "no error output"
    return LaneError(f"`{shlex.join(result.args)}` failed (exit {result.returncode}): {detail}")


def git(repo: Path, *args: str, timeout: float = 60) -> str:
    """Run `git -C repo args` in a clean environment; its stdout, or LaneError with its stderr."""
    result = _run(repo, *args, timeout=timeout)
    if result.returncode != 0:
        raise _failure(result)
    return _decode(result.stdout)


def _no_option(value: str, what: str) -> None:
    # Values reach git as positional arguments; a leading dash would be read as an option.
    if not value or value.startswith("-"):
        raise LaneError(f"{what} {value!r} is not valid: it must be non-empty, not start with '-'")


def require_repository(path: Path) -> Path:
    """The top level of the git checkout containing `path`; LaneError if there is none."""
    result = _run(path, "rev-parse", "--show-toplevel") if path.is_dir() else None
    if result is None or result.returncode != 0:
        raise LaneError(
            f"{path} is not a git repository; set ADE_PROJECTS__<name> to a git checkout "
            "or run `git init` there"
        )
    return Path(_decode(result.stdout).strip())


def _resolve_commit(repo: Path, ref: str, what: str) -> str:
    _no_option(ref, what)
    result = _run(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if result.returncode != 0:
        raise LaneError(
            f"{what} {ref!r} is not a commit in {repo}; use an existing branch, tag or commit "
            "(see `git branch -a`)"
        )
    return _decode(result.stdout).strip()


def slugify(name: str) -> str:
    """`name` as a directory and branch component: lowercase [a-z0-9._-], no `..`, no leading -."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9._-]+", "-", ascii_name.lower())
    slug = re.sub(r"\.{2,}", ".", re.sub(r"-{2,}", "-", slug))
    # Leading '.' hides the directory and is invalid in a ref; a trailing '.' or '.lock' too.
    slug = slug[:SLUG_MAX].strip(".-")
    if slug.endswith(".lock"):
        slug = slug[: -len(".lock")] + "-lock"
    return slug


def _candidates(name: str, slug: str) -> Iterator[tuple[str, str]]:
    yield name, slug
    for n in range(2, MAX_COUNTER + 1):
        yield f"{name} (#{n})", f"{slug}-{n}"
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    yield f"{name} ({stamp})", f"{slug}-{stamp}"


def _worktrees(repo: Path) -> list[_Worktree]:
    # -z: a path may contain a newline. Records are NUL-terminated lines, blocks end with NUL.
    found: list[_Worktree] = []
    for block in git(repo, "worktree", "list", "--porcelain", "-z").split("\0\0"):
        fields = dict(line.partition(" ")[::2] for line in block.split("\0") if line)
        if "worktree" in fields:
            branch = fields.get("branch", "").removeprefix("refs/heads/") or None
            found.append(_Worktree(Path(os.path.realpath(fields["worktree"])), branch))
    return found


def _branch_exists(repo: Path, branch: str) -> bool:
    return _run(repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}").returncode == 0


def _branch_name(repo: Path, branch: str) -> str:
    result = _run(repo, "check-ref-format", "--branch", branch)
    if result.returncode != 0:
        raise LaneError(
            f"lane branch {branch!r} is not a valid git branch name; fix the branch prefix "
            "(see `git check-ref-format --help`)"
        )
    return _decode(result.stdout).strip()


def _taken(repo: Path, path: Path, branch: str) -> bool:
    registered = {w.path for w in _worktrees(repo)}
    return os.path.lexists(path) or _branch_exists(repo, branch) or path in registered


def create_lane(
    repo: Path, lanes_root: Path, name: str, base_ref: str = "HEAD", branch_prefix: str = "ade/"
) -> Lane:
    """Add a worktree on a new branch off `base_ref`; a taken name becomes `name (#2)`, ... ."""
    repo = require_repository(repo)
    base_sha = _resolve_commit(repo, base_ref, "base ref")
    slug = slugify(name)
    if not slug:
        raise LaneError(f"lane name {name!r} has no letters or digits; use a name like 'fix-login'")
    lanes_root.mkdir(parents=True, exist_ok=True)
    root = Path(os.path.realpath(lanes_root))
    for display, candidate in _candidates(name, slug):
        branch = _branch_name(repo, branch_prefix + candidate)
        if _taken(repo, root / candidate, branch):
            continue
        path = resolve_inside(root, candidate, what="lane directory")
        result = _run(repo, "worktree", "add", "-b", branch, str(path), base_sha)
        if result.returncode != 0:
            if _taken(repo, path, branch):  # another process took it since we looked
                continue
            raise _failure(result)
        meta = {"adeLane": display, "adeBaseRef": base_ref, "adeBaseSha": base_sha}
        for key, value in meta.items():
            git(repo, "config", f"branch.{branch}.{key}", value)
        return Lane(display, branch, path, base_ref, base_sha)
    raise LaneError(
        f"lane name {name!r} and its variants are all taken under {root}; "
        "delete old lanes or choose another name"
    )


def _lane_metadata(repo: Path) -> dict[tuple[str, str], str]:
    result = _run(repo, "config", "--null", "--get-regexp", r"^branch\..*\.ade")
    meta: dict[tuple[str, str], str] = {}
    for record in _decode(result.stdout).split("\0"):
        key, _, value = record.partition("\n")
        # The section and variable are case-insensitive (git lowercases them); the branch is not.
        branch, _, variable = key.removeprefix("branch.").rpartition(".")
        if branch:
            meta[(branch, variable.lower())] = value
    return meta


def find_lane(repo: Path, lanes_root: Path, name: str) -> Lane | None:
    """The lane under `lanes_root` with this display name or slug; None if there is none."""
    repo = require_repository(repo)
    root = Path(os.path.realpath(lanes_root))
    meta = _lane_metadata(repo)
    lanes: list[Lane] = []
    for tree in _worktrees(repo):
        if tree.branch is not None and tree.path.parent == root:
            display = meta.get((tree.branch, "adelane"), tree.path.name)
            base_ref = meta.get((tree.branch, "adebaseref"), "")
            base_sha = meta.get((tree.branch, "adebasesha"), "")
            lanes.append(Lane(display, tree.branch, tree.path, base_ref, base_sha))
    # An exact display name wins over a slug match: "fix (#2)" and "fix-2" may both exist.
    exact = [lane for lane in lanes if lane.name == name]
    slugged = [lane for lane in lanes if lane.path.name in (name, slugify(name))]
    return next(iter(exact + slugged), None)


def _status_paths(worktree: Path) -> list[str]:
    raw = git(worktree, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    records = iter(raw.split("\0"))
    paths: list[str] = []
    for record in records:
        if not record:
            continue
        status, path = record[:2], record[3:]
        paths.append(path)
        if "R" in status or "C" in status:  # `XY new\0old\0`: both paths changed
            paths.append(next(records))
    return paths


def changed_paths(worktree: Path, base: str | None = None) -> list[str]:
    """Files changed, staged or untracked in `worktree`, plus those committed since `base`."""
    paths = set(_status_paths(worktree))
    if base is not None:
        _no_option(base, "base")
        # --no-renames: a rename must report the old path too; --no-relative: always repo-rooted.
        raw = git(
            worktree, "diff", "--name-only", "-z", "--no-renames", "--no-relative", f"{base}...HEAD"
        )
        paths.update(p for p in raw.split("\0") if p)
    return sorted(paths)


def _refuse_dirty(worktree: Path) -> None:
    dirty = _status_paths(worktree)
    if dirty:
        shown = ", ".join(dirty[:10]) + (
            f" (and {len(dirty) - 10} more)" if len(dirty) > 10 else ""
        )
        raise LaneError(
            f"lane {worktree} has uncommitted or untracked changes: {shown}; "
            "commit them, or pass force: true to discard them"
        )


def delete_lane(
    repo: Path,
    lane_path: Path,
    branch: str,
    *,
    force: bool = False,
    remote: str | None = None,
    delete_branch: bool = True,
) -> DeleteResult:
    """Remove the lane's worktree, its branch (unless `delete_branch` is false) and optionally
    its remote branch; safe to repeat."""
    repo = require_repository(repo)
    _no_option(branch, "branch")
    path = Path(os.path.realpath(lane_path))
    if path == Path(os.path.realpath(repo)):
        raise LaneError(f"{path} is the main checkout of {repo}, not a lane; pass the lane's path")
    tree = next((w for w in _worktrees(repo) if w.path == path), None)
    done: list[str] = []
    if tree is not None:
        if tree.branch not in (None, branch):
            raise LaneError(
                f"worktree {path} is on branch {tree.branch!r}, not {branch!r}; pass its branch"
            )
        if path.exists():
            if not force:
                _refuse_dirty(path)
            git(repo, "worktree", "remove", *(["--force"] if force else []), str(path))
        done.append(f"removed worktree {path}")
    elif path.exists():
        raise LaneError(
            f"{path} exists but is not a worktree of {repo}; it was not deleted, "
            "remove it by hand if it is a leftover"
        )
    # Clears a registration whose directory vanished (e.g. a crash inside `worktree remove`).
    git(repo, "worktree", "prune")
    removed_branch = delete_branch and _branch_exists(repo, branch)
    if not delete_branch:
        done.append(f"kept branch {branch}")
    elif removed_branch:
        git(repo, "branch", "-D", branch)
        done.append(f"deleted branch {branch}")
    removed_remote = False
    if remote is not None:
        _no_option(remote, "remote")
        ref = f"refs/heads/{branch}"
        # Some servers refuse deleting a missing ref, others accept it: ask first, then delete.
        listed = _run(repo, "ls-remote", "--exit-code", remote, ref)
        if listed.returncode not in (0, 2):
            raise _failure(listed)
        removed_remote = listed.returncode == 0
        if removed_remote:
            git(repo, "push", "--delete", remote, ref)
            done.append(f"deleted {branch} on {remote}")
    note = "; ".join(done) if done else "already gone"
    return DeleteResult(tree is not None, removed_branch, removed_remote, note)


def predict_conflicts(repo: Path, branch: str, base: str) -> list[str]:
    """Files that would conflict if `branch` were merged into `base`; [] when it merges clean."""
    ours = _resolve_commit(repo, base, "base")
    theirs = _resolve_commit(repo, branch, "branch")
    # Exit 1 means conflicts, but git 2.39 also exits 1 on a bad ref: hence the resolving above
    # and the tree-oid check below.
    args = ("merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", ours, theirs)
    result = _run(repo, *args)
    records = [r for r in _decode(result.stdout).split("\0") if r]
    if result.returncode not in (0, 1) or not records or not _OID.fullmatch(records[0]):
        raise _failure(result)
    return sorted(set(records[1:])) if result.returncode == 1 else []


def paths_outside(paths: Iterable[str], allowed_globs: Sequence[str]) -> list[str]:
    """The paths matching none of `allowed_globs`, in input order; none when the list is empty."""
    if not allowed_globs:
        return []
    return [path for path in paths if not path_matches(path, allowed_globs)]


def name_allowed(name: str, globs: Sequence[str]) -> bool:
    """Whether a lane display name matches one of `allowed_lanes` (fnmatch); empty allows all."""
    return not globs or any(fnmatch.fnmatchcase(name, g) for g in globs)
