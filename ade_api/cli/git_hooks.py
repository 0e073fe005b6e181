"""The git hooks `ade-tasks hooks install` writes: `post-commit` (a developer's clone) emits
`git.commit`, `post-receive` (a server-side, usually bare, repository) emits `git.push`.

Each hook is a small POSIX sh script that calls `ade-tasks emit` by its absolute path in a
background subshell with every standard stream closed, so git never waits for it, a slow or
absent API never slows a commit or a push, and the hook always exits 0. Its delivery id is
derived from the repository, the sha (and the ref for a push), so running it again for the same
commit stores nothing new. A hook that was there before (moved aside with `--force` to
`<hook>.ade-backup`) still runs first, as it did before.

An ADE hook carries `MARKER` on its second line; a hook without it is someone else's and is
never overwritten or removed without `--force`.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MARKER = "# ade-tasks hook"
BACKUP_SUFFIX = ".ade-backup"
HOOK_NAMES = ("post-commit", "post-receive")
EMIT_TIMEOUT_SECONDS = 5
GIT_TIMEOUT_SECONDS = 10

_PREAMBLE = """#!/bin/sh
{marker}: emits {event} to ADE Tasks ({why}).
# Installed by `ade-tasks hooks install`; `ade-tasks hooks uninstall` removes it. It runs in the
# background with a {timeout}s timeout and always exits 0, so it never slows or fails git.
ade_tasks={bin}
ade_repo() {{
  git config --get ade.repo && return
  dir=$(git rev-parse --show-toplevel 2>/dev/null) || dir=$(pwd -P)
  dir=${{dir%/}}
  dir=${{dir%/.git}}
  basename "$dir" .git
}}
"""

_POST_COMMIT = """
if [ -x "$0{backup}" ]; then "$0{backup}" "$@"; fi
(
  sha=$(git rev-parse -q --verify HEAD) || exit 0
  repo=$(ade_repo)
  branch=$(git symbolic-ref -q --short HEAD) || branch=
  title=$(git log -1 --format=%s "$sha")
  author=$(git log -1 --format=%an "$sha")
  if git rev-parse -q --verify "$sha^" >/dev/null; then
    git diff --no-renames -z --name-only "$sha^" "$sha"
  else
    git ls-tree -z -r --name-only "$sha"
  fi | "$ade_tasks" emit git.commit{url} --timeout {timeout} --paths-from - \\
      --repo "$repo" --branch "$branch" --sha "$sha" --title "$title" --author "$author" \\
      --delivery-id "git.commit:$repo:$sha"
) </dev/null >/dev/null 2>&1 &
exit 0
"""

_POST_RECEIVE = """
refs=$(cat)
if [ -x "$0{backup}" ]; then printf '%s\\n' "$refs" | "$0{backup}" "$@"; fi
(
  repo=$(ade_repo)
  printf '%s\\n' "$refs" | while read -r old new ref; do
    # A deleted ref (new sha all zeros) leaves no commit for a rule to run against.
    case $new in *[!0]*) ;; *) continue ;; esac
    case $ref in refs/heads/*) branch=${{ref#refs/heads/}} ;; *) branch= ;; esac
    sha=$(git rev-parse -q --verify "$new^{{commit}}" </dev/null) || sha=$new
    title=$(git log -1 --format=%s "$sha" </dev/null)
    author=$(git log -1 --format=%an "$sha" </dev/null)
    case $old in
      *[!0]*) git diff --no-renames -z --name-only "$old" "$new" </dev/null ;;
      *) git ls-tree -z -r --name-only "$new" </dev/null ;;
    esac | "$ade_tasks" emit git.push{url} --timeout {timeout} --paths-from - \\
        --repo "$repo" --branch "$branch" --sha "$sha" --title "$title" --author "$author" \\
        --delivery-id "git.push:$repo:$ref:$new"
  done
) </dev/null >/dev/null 2>&1 &
exit 0
"""


class HookError(Exception):
    """A hook could not be installed or removed; the message says why and what to do."""


@dataclass(frozen=True)
class HookChange:
    """What `install` or `uninstall` did to one hook, in words for the operator."""

    name: str
    path: Path
    outcome: str


def hook_script(name: str, executable: str, url: str | None = None) -> str:
    """The sh script of hook `name` (`post-commit` or `post-receive`) calling `executable`."""
    url_arg = f" --url {shlex.quote(url)}" if url else ""
    fields = {
        "marker": MARKER,
        "bin": shlex.quote(executable),
        "timeout": EMIT_TIMEOUT_SECONDS,
        "backup": BACKUP_SUFFIX,
        "url": url_arg,
    }
    if name == "post-commit":
        body, event, why = _POST_COMMIT, "git.commit", "after each commit in this clone"
    elif name == "post-receive":
        body, event, why = _POST_RECEIVE, "git.push", "for each ref pushed to this repository"
    else:
        raise ValueError(f"unknown hook {name!r}; ADE installs {', '.join(HOOK_NAMES)}")
    return _PREAMBLE.format(event=event, why=why, **fields) + body.format(**fields)


def is_ade_hook(path: Path) -> bool:
    """Whether the file at `path` is a hook ADE wrote (it carries `MARKER`)."""
    try:
        head = path.read_bytes()[:512]
    except OSError:
        return False
    return MARKER.encode() in head


def ade_executable() -> str:
    """The absolute path of the running `ade-tasks`, which the hooks call."""
    argv0 = Path(sys.argv[0])
    # Under a test runner or `python -m`, argv[0] is not ade-tasks; look for the console script.
    if argv0.name.startswith("ade-tasks") and argv0.is_file():
        return str(argv0.resolve())
    for candidate in (shutil.which("ade-tasks"), Path(sys.executable).parent / "ade-tasks"):
        if candidate and Path(candidate).is_file():
            return str(Path(candidate).resolve())
    raise HookError(
        "cannot find the ade-tasks executable the hooks should call; install ADE Tasks "
        "(pip install -e .) and run `ade-tasks hooks install` through it"
    )


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise HookError("git is not installed (or not on PATH); install git first") from exc
    except subprocess.TimeoutExpired as exc:
        raise HookError(f"git {' '.join(args)} in {repo} took over {exc.timeout}s") from exc
    if done.returncode != 0:
        raise HookError(done.stderr.strip() or f"git {' '.join(args)} failed in {repo}")
    return done.stdout.strip()


def hooks_dir(repo: Path) -> Path:
    """The hooks directory of the repository at `repo` (respects `core.hooksPath`)."""
    if not repo.is_dir():
        raise HookError(f"{repo} is not a directory; pass the path of a git repository")
    try:
        found = _git(repo, "rev-parse", "--git-path", "hooks")
    except HookError as exc:
        raise HookError(
            f"{repo} is not a git repository ({exc}); run `git init` there or pass the path "
            "of a clone (for post-commit) or of a bare server repository (for post-receive)"
        ) from exc
    path = Path(found)
    return path if path.is_absolute() else (repo / path).resolve()


def repo_name(repo: Path) -> str:
    """What the hooks send as `repo`: `git config ade.repo`, else the directory's name."""
    try:
        configured = _git(repo, "config", "--get", "ade.repo")
    except HookError:
        configured = ""
    if configured:
        return configured
    resolved = repo.resolve()
    if resolved.name == ".git":
        resolved = resolved.parent
    return resolved.name.removesuffix(".git") or resolved.name


def install(repo: Path, executable: str, url: str | None, *, force: bool) -> list[HookChange]:
    """Write both hooks into `repo`; another tool's hook is refused unless `force` (then kept
    as `<hook>.ade-backup` and still run first)."""
    directory = hooks_dir(repo)
    targets = [directory / name for name in HOOK_NAMES]
    # Check every hook before writing any, so a refusal leaves the repository as it was.
    for path in targets:
        if path.exists() and not is_ade_hook(path):
            backup = path.with_name(path.name + BACKUP_SUFFIX)
            if not force:
                raise HookError(
                    f"{path} exists and is not an ADE hook; re-run with --force to keep it as "
                    f"{backup.name} (it still runs before the ADE hook) or merge it by hand"
                )
            if backup.exists():
                raise HookError(
                    f"{path} is not an ADE hook and {backup} already exists; move one of them "
                    "away first, so no hook is lost"
                )
    directory.mkdir(parents=True, exist_ok=True)
    changes = []
    for path in targets:
        if path.exists() and not is_ade_hook(path):
            path.rename(path.with_name(path.name + BACKUP_SUFFIX))
            outcome = f"installed (the previous hook is kept as {path.name}{BACKUP_SUFFIX})"
        elif path.exists():
            outcome = "updated"
        else:
            outcome = "installed"
        path.write_text(hook_script(path.name, executable, url))
        path.chmod(0o755)
        changes.append(HookChange(path.name, path, outcome))
    return changes


def uninstall(repo: Path) -> list[HookChange]:
    """Remove the ADE hooks from `repo`, restoring a hook `install --force` kept aside."""
    directory = hooks_dir(repo)
    changes = []
    for name in HOOK_NAMES:
        path = directory / name
        backup = path.with_name(name + BACKUP_SUFFIX)
        if not path.exists():
            outcome = "not installed"
        elif not is_ade_hook(path):
            outcome = "left alone (not an ADE hook)"
        elif backup.exists():
            backup.replace(path)
            outcome = f"removed; restored the previous hook from {backup.name}"
        else:
            path.unlink()
            outcome = "removed"
        changes.append(HookChange(name, path, outcome))
    return changes
