"""Pushing a lane's commits to a GitHub branch over HTTPS with the cluster's token, never
forced.

The token reaches git only as an `http.extraheader` in the environment of the one `git push`
(`GIT_CONFIG_COUNT`), never on its command line and never in the lane's `.git/config`, and
git's output is scrubbed of it (and of its Basic form) before anyone reads it. Hooks and the
fsmonitor are off for the push (an agent's worktree must not run code as the worker, with
the token in its environment). A push GitHub rejects because the branch moved (git's
`[rejected]`, or an HTTP 409/422 from the server) is a `PushRejectedError` whose message says
what to do: the branch is never overwritten.
"""

from __future__ import annotations

import base64
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ade_tasks.errors import AdeError

#: Environment variables that would point git at another repository than the worktree's.
_REPO_ENV = frozenset(
    {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR"}
)
COMMITTER = ("-c", "user.name=ADE Tasks", "-c", "user.email=ade-tasks@localhost")
MOVED = (
    "the branch {branch} moved on GitHub (someone pushed to it since the lane's commits were "
    "made), so pushing would drop their commits; nothing was pushed, and the engine never "
    "force-pushes. Fetch and rebase the lane onto the branch's new head, then push again"
)


class PushRejectedError(AdeError):
    """GitHub refused the push; the message says why and what to do."""


@dataclass(frozen=True)
class Pushed:
    """A push that GitHub accepted: the commit the branch now points at, and whether the
    branch was already there (`up_to_date`: nothing new to push)."""

    sha: str
    up_to_date: bool


def git(worktree: Path, *args: str, timeout: float = 60) -> str:
    """`git -C worktree args` as the worker, hooks off; its stdout, or AdeError with stderr."""
    result = _run(worktree, list(args), {}, timeout)
    if result.returncode != 0:
        raise AdeError(f"git {args[0]} failed: {result.stderr.strip()[-500:]}")
    return result.stdout


def commit_all(worktree: Path, message: str) -> str | None:
    """Commit every change of the worktree with `message` (as ADE Tasks); the new commit's
    sha, or None when there was nothing to commit."""
    if not git(worktree, "status", "--porcelain").strip():
        return None
    git(worktree, "add", "-A")
    git(worktree, *COMMITTER, "commit", "-q", "-m", message)
    return git(worktree, "rev-parse", "HEAD").strip()


def push(worktree: Path, url: str, token: str, branch: str, *, timeout: float = 120) -> Pushed:
    """Push the worktree's HEAD to `branch` at `url` (a fast-forward or a new branch)."""
    sha = git(worktree, "rev-parse", "HEAD").strip()
    header = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    secrets = [token, header]
    env = {"http.extraheader": f"Authorization: Basic {header}"}
    result = _run(
        worktree,
        ["push", "--porcelain", "--no-verify", url, f"HEAD:refs/heads/{branch}"],
        env,
        timeout,
    )
    said = _scrub(f"{result.stdout}\n{result.stderr}", secrets)
    if result.returncode == 0:
        return Pushed(sha, up_to_date="[up to date]" in said)
    if "[rejected]" in said and ("fetch first" in said or "non-fast-forward" in said):
        raise PushRejectedError(MOVED.format(branch=branch))
    if "error: 409" in said or "error: 422" in said or "HTTP 409" in said or "HTTP 422" in said:
        raise PushRejectedError(MOVED.format(branch=branch) + f" (GitHub: {_tail(said)})")
    if "protected branch" in said.lower() or "GH006" in said:
        raise PushRejectedError(
            f"{branch} is a protected branch on GitHub; the engine never pushes to one"
        )
    if "error: 403" in said or "error: 401" in said:
        raise PushRejectedError(
            f"GitHub refused the push to {branch} ({_tail(said)}): the cluster's token "
            "(ADE_GITHUB__TOKEN) cannot write to this repository; tell the operator"
        )
    raise PushRejectedError(f"git push to {branch} failed: {_tail(said)}")


def _run(
    worktree: Path, args: list[str], config: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
    settings = {
        "safe.bareRepository": "explicit",
        "core.hooksPath": "/dev/null",
        "core.fsmonitor": "false",
        "credential.helper": "",
        **config,
    }
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_CONFIG_COUNT=str(len(settings)))
    for index, (key, value) in enumerate(settings.items()):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    try:
        return subprocess.run(
            ["git", "-C", str(worktree), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise AdeError(f"git {args[0]} timed out after {timeout:g}s") from None


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-3:])[:500]
