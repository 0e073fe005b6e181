"""Agent-user benchmark: what `ADE_AGENT_USER` costs a session, against the same work without it,
in one run.

(a) Opening the worktree (`AgentUser.open_worktree`) on a tree of `--files` files: the first pass
    (every file and directory becomes the user's) and a repeat pass (nothing left to change, as
    for every later session in the same worktree), against a baseline pass that only visits the
    same tree the same way (`os.fwalk`, one open and fstat per file) and changes nothing.
(b) A command as the agent user: `true` through `run_process` with `user=` against the same
    command as the worker, `--commands` times each, p50 and p99.

Needs root (switching users does). From the repository root (a few seconds):

    sudo .venv/bin/python bench/agent_user.py [--user nobody] [--files 20000] [--commands 300]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as `python bench/agent_user.py`: import from the repository
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ade_tasks.agents.protected import ProtectedPaths
from ade_workers.containment.agent_user import AgentUser
from ade_workers.containment.process import run_process
from bench.common import BenchError, percentile

FILES_PER_DIR = 50


def make_tree(root: Path, files: int) -> None:
    """`files` small files, `FILES_PER_DIR` to a directory, as a checkout leaves them (0644)."""
    for index in range(files):
        directory = root / f"pkg{index // FILES_PER_DIR:04d}"
        if index % FILES_PER_DIR == 0:
            directory.mkdir(parents=True)
        (directory / f"m{index}.py").write_text("x = 1\n")


def visit(root: Path) -> None:
    """The baseline: the same walk and one open and fstat per file, changing nothing."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _, _, filenames, dirfd in os.fwalk(root):
        os.fstat(dirfd)
        for name in filenames:
            fd = os.open(name, flags, dir_fd=dirfd)
            os.fstat(fd)
            os.close(fd)


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def open_worktree_figures(user: AgentUser, files: int) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="ade-bench-agent-user-", dir="/tmp"))
    try:
        scratch.chmod(0o755)
        tree = scratch / "wt"
        make_tree(tree, files)
        protected = ProtectedPaths(worktree=str(tree))
        baseline = min(timed(lambda: visit(tree)) for _ in range(3))
        first = timed(lambda: user.open_worktree(tree, protected))
        repeat = min(timed(lambda: user.open_worktree(tree, protected)) for _ in range(3))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"(a) opening a worktree of {files:,} files to {user.name}:")
    print(f"    visit only (baseline)  {baseline * 1000:8.1f} ms")
    print(f"    first open             {first * 1000:8.1f} ms   {first / baseline:5.2f}x")
    print(f"    repeat open            {repeat * 1000:8.1f} ms   {repeat / baseline:5.2f}x")


def command_figures(user: AgentUser, commands: int) -> None:
    env = {"PATH": os.environ.get("PATH", os.defpath)}

    def run(ids: tuple[int, int] | None) -> float:
        result = run_process(["true"], cwd=Path("/tmp"), env=env, timeout=10, user=ids)
        if result.exit_code != 0:
            raise BenchError(f"`true` as {ids or 'the worker'} failed: {result.output}")
        return result.duration

    run(None), run(user.ids)  # warm the supervisors
    worker, agent = [], []
    for _ in range(commands):  # interleaved, so load drifts hit both alike
        worker.append(run(None))
        agent.append(run(user.ids))
    w50, a50 = statistics.median(worker), statistics.median(agent)
    print(f"(b) `true` through run_process, {commands} times each:")
    print(
        f"    as the worker (baseline)  p50 {w50 * 1000:6.2f} ms  p99 "
        f"{percentile(worker, 99) * 1000:6.2f} ms"
    )
    print(
        f"    as {user.name:<21} p50 {a50 * 1000:6.2f} ms  p99 "
        f"{percentile(agent, 99) * 1000:6.2f} ms   {a50 / w50:5.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--user", default="nobody")
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--commands", type=int, default=300)
    args = parser.parse_args()
    if not 1 <= args.files <= 200_000 or not 1 <= args.commands <= 10_000:
        raise SystemExit("--files must be 1..200000 and --commands 1..10000")
    if os.geteuid() != 0:
        raise SystemExit("switching to the agent user needs root: run it with sudo")
    user = AgentUser.named(args.user)
    if user is None:
        raise SystemExit(f"--user {args.user} is this process's own user; name another one")
    open_worktree_figures(user, args.files)
    command_figures(user, args.commands)


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        raise SystemExit(f"benchmark failed: {exc}") from None
