"""What a sandboxed process sees, as a `bwrap` command line.

Paths keep their names inside (the worktree is at its own path), so a command's cwd, its
environment and the paths a CLI reports need no translation. The layout, in mount order:

- read-only system directories (`/usr`, `/etc` and the merged-/usr links), with the host's
  secret files in `/etc` (shadow, private keys) replaced by empty ones;
- a fresh `/proc` of the sandbox's own PID namespace, a minimal `/dev`, an empty `/tmp`, `/run`
  and `/var/tmp` (capped, `SCRATCH`): no other process of the host, nothing another session left;
- the worktree, read-write (read-only for a `plan` session), with `.git` (and a lane's git
  directories) read-only unless the layout says otherwise (a command step of the rule's own);
  the session's private home and directories (or, for a command step, an empty capped `home`
  at the path of `$HOME`); the CLI's install and the engine's helper copies read-only;
- the engine hidden wherever it lies under those: its packages, virtualenv, data directory and
  token file become empty, read-only directories (files: empty files); a rule author's own
  command step gets the packages and virtualenv read-only instead (`read_only`), never the data;
- namespaces: user (no capabilities, no further user namespaces), PID (the first process is its
  init: when it ends, every process of the sandbox ends with it, and none can signal it), IPC,
  UTS, cgroup, and a network of its own holding only a loopback unless the layout says `host`.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

Network = Literal["none", "host"]

#: System directories every sandbox sees, read-only (those that exist on the host).
SYSTEM_DIRECTORIES = ("/usr", "/etc")
#: Top-level names that are links into /usr on merged-/usr systems, directories elsewhere.
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Host files under /etc that hold secrets; each becomes an empty file inside.
SECRET_FILES = (
    "shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "ssh/ssh_host_rsa_key",
    "ssh/ssh_host_ecdsa_key", "ssh/ssh_host_ed25519_key", "ssh/ssh_host_dsa_key",
)  # fmt: skip
#: The sandbox's own scratch directories (memory-backed) and their caps in bytes: a process
#: that fills one gets ENOSPC, and the host's memory stays bounded.
SCRATCH = {"/tmp": 1 << 30, "/var/tmp": 256 << 20, "/run": 16 << 20}
#: The cap of a command step's home (memory-backed, like the scratch directories).
HOME_SIZE = 512 << 20
#: Host directories under /etc that hold secrets; each becomes an empty directory inside.
SECRET_DIRECTORIES = ("ssl/private",)


@dataclass(frozen=True)
class Forward:
    """A TCP port on the sandbox's loopback whose connections go to a Unix socket outside."""

    port: int
    socket: Path


@dataclass(frozen=True)
class Sandbox:
    """The filesystem and namespaces one sandboxed command gets."""

    bwrap: str
    worktree: Path
    python: str
    """An interpreter that runs inside (for the forwarder): the worker's, from its base install."""
    forwarder: Path | None = None
    """The engine's copy of `forward.py` (needed when `forwards` is not empty)."""
    writable: bool = True
    git_writable: bool = False
    """Are the worktree's git directories writable too (a command step's `git fetch`)?"""
    home: Path | None = None
    """An empty, capped, writable directory made at this path (`$HOME` for a command step)."""
    network: Network = "none"
    read_write: tuple[Path, ...] = ()
    read_only: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    forwards: tuple[Forward, ...] = ()
    worktree_identity: tuple[int, int] = (0, 0)
    """The worktree's (device, inode) when the layout was made: a sandbox kept for reuse is
    another sandbox than one for a directory made since at the same path (a lane recreated)."""

    def launch(self, supervisor: Path, fd: int) -> list[str]:
        """The engine's copy of the supervisor's program (`supervisor`) run inside this sandbox,
        serving the socket at descriptor `fd`: it and every command it runs share the sandbox,
        so a command costs a round trip, not a sandbox of its own."""
        with_copy = replace(self, read_only=(*self.read_only, supervisor.parent))
        return with_copy.command([self.python, "-I", "-S", str(supervisor), str(fd)], "/")

    def command(self, argv: Sequence[str], cwd: str) -> list[str]:
        """`argv` as it runs inside this sandbox, starting in `cwd`."""
        args = [
            self.bwrap, "--die-with-parent", "--new-session", "--unshare-user", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--disable-userns",
            "--cap-drop", "ALL",
        ]  # fmt: skip
        if self.network == "none":
            args.append("--unshare-net")
        args += _system()
        args += ["--proc", "/proc", "--dev", "/dev"]
        for scratch, size in SCRATCH.items():
            args += ["--size", str(size), "--tmpfs", scratch]
        if self.home is not None:
            args += _home(self.home, self.worktree)
        args += _interpreter(self.python)
        binds: list[tuple[Path, bool]] = [(self.worktree, self.writable)]
        binds += [(path, True) for path in self.read_write]
        targets = [path for path, _ in binds]
        visible = [Path(p) for p in (*SYSTEM_DIRECTORIES, "/tmp", "/run")]
        visible += [*targets, Path(self.python).parent.parent]
        masked = [path for path in self.hidden if _under_any(path, visible) and path.exists()]
        # A hidden directory that holds the worktree (a lane under the data directory) is
        # emptied first, so the worktree's bind shows through it; the rest go over the binds.
        around = [path for path in masked if any(_under_any(t, [path]) for t in targets)]
        args += _masks(around)
        for path, writable in sorted(binds, key=lambda bind: len(bind[0].parts)):
            args += ["--bind" if writable else "--ro-bind", str(path), str(path)]
        for git in git_directories(self.worktree):
            args += ["--bind" if self.git_writable else "--ro-bind", str(git), str(git)]
        args += _masks([path for path in masked if path not in around])
        read_only = [*self.read_only, *([self.forwarder.parent] if self.forwarder else [])]
        for path in sorted(set(read_only), key=lambda p: len(p.parts)):
            args += ["--ro-bind", str(path), str(path)]
        for path in masked:
            if path.is_dir():
                args += ["--remount-ro", str(path)]
        args += ["--chdir", cwd, "--"]
        if self.forwards:
            if self.forwarder is None:
                raise ValueError("a sandbox with forwarded ports needs the forwarder's copy")
            args += [self.python, "-I", "-S", str(self.forwarder)]
            args += [f"{f.port}={f.socket}" for f in self.forwards] + ["--"]
        return args + [os.fspath(arg) for arg in argv]


def _masks(paths: Sequence[Path]) -> list[str]:
    """Each path emptied: a directory becomes an empty tmpfs, a file an empty file."""
    args: list[str] = []
    for path in paths:
        args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    return args


def _system() -> list[str]:
    args: list[str] = []
    for directory in SYSTEM_DIRECTORIES:
        if os.path.isdir(directory):
            args += ["--ro-bind", directory, directory]
    for link in SYSTEM_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    for name in SECRET_FILES:
        if os.path.isfile(path := f"/etc/{name}"):
            args += ["--ro-bind", "/dev/null", path]
    for name in SECRET_DIRECTORIES:
        if os.path.isdir(path := f"/etc/{name}"):
            args += ["--tmpfs", path, "--remount-ro", path]
    return args


def _interpreter(python: str) -> list[str]:
    """The interpreter's base install, read-only, when it is not a system directory's (its
    site-packages are hidden with the rest of the engine)."""
    prefix = Path(python).parent.parent
    if _under_any(prefix, [Path(d) for d in SYSTEM_DIRECTORIES]):
        return []
    return ["--ro-bind", str(prefix), str(prefix)]


@functools.cache
def worker_python() -> str:
    """The worker's interpreter, by its real path (a virtualenv's `python` is a link to it)."""
    return os.path.realpath(sys.executable)


def git_directories(worktree: Path) -> list[Path]:
    """The git directories a worktree uses: its `.git`, or a lane's git directory and the
    repository's common directory that its `.git` file points to."""
    dot_git = worktree / ".git"
    if dot_git.is_dir():
        return [dot_git]
    if not dot_git.is_file():
        return []
    found: list[Path] = []
    text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
    if text.startswith("gitdir:"):
        gitdir = (worktree / text.removeprefix("gitdir:").strip()).resolve()
        found.append(gitdir)
        common = gitdir / "commondir"
        if common.is_file():
            found.append((gitdir / common.read_text(encoding="utf-8").strip()).resolve())
    return [path for path in found if path.is_dir()]


def _home(home: Path, worktree: Path) -> list[str]:
    """An empty, writable `home`: a capped tmpfs of its own, or a directory in the scratch
    tmpfs it lies in; nothing for `/`, a system directory or a path in the worktree (which is
    writable already)."""
    system = [Path(p) for p in (*SYSTEM_DIRECTORIES, *SYSTEM_LINKS, "/proc", "/dev")]
    if home == Path("/") or _under_any(home, [*system, worktree]):
        return []
    if _under_any(home, [Path(p) for p in SCRATCH]):
        return ["--dir", str(home)]
    return ["--size", str(HOME_SIZE), "--tmpfs", str(home)]


def _under_any(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)
