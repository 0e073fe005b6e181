"""The unprivileged user agent sessions run as, when the operator names one (`ADE_AGENT_USER`).

With it set, every process of an agent session runs as that user (its uid, its primary group,
no supplementary groups): a CLI (claude, codex) with its hooks and tools, and each `bash` call of
an HTTP session. The engine's policy already refuses agents the engine's data and `.git`
internals; with an agent user the operating system refuses them too, to whatever a shell
command does: the data directory (0700, the worker's), the API token file, a 0600 secrets file,
the repository's `.git` (the worker's, never made writable).

What the engine does for a session:
- leases a user no other session holds (`AgentUsers.lease`): sessions of one user can reach each
  other, so the operator names one user per agent session that runs at a time;
- checks that the user can reach the worktree: every directory above it must let the user in
  (search permission as owner, group or other). A lane under the 0700 data directory cannot be
  reached, so with an agent user lanes go under `ADE_LANES_ROOT`;
- makes the worktree's content the user's, except the engine's entries, and keeps the
  directories on the way to those the worker's, group-writable and sticky (`open_worktree`);
- runs an HTTP session's file tools with the user's file access (`file_access`);
- hands the session's private home, config directory and decision socket to the user (chown).

`run-command` and `run-tests` steps are the rule author's own commands and keep running as the
worker; their git never discovers a bare repository (`NO_BARE_DISCOVERY` in run_command.py), but
a command that runs code an agent changed (its tests, its scripts) runs it as the worker.
Switching users needs a worker running as root; naming the worker's own user changes nothing,
and naming root or an unknown user is refused at the first session with the reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import platform
import pwd
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ade_tasks.agents.protected import DATA_DIR_NAME, GIT_DIR_NAME, ProtectedPaths
from ade_tasks.errors import AdeError
from ade_tasks.settings import Settings

SETTING = "ADE_AGENT_USER"
#: How often a session waiting for a free agent user looks again.
LEASE_POLL_SECONDS = 0.2
#: Where a Python the agent user may run is looked for after the worker's own (a virtualenv
#: in a home directory is out of its reach).
SYSTEM_PYTHONS = ("/usr/local/bin/python3", "/usr/bin/python3")
_SKIPPED_NAMES = frozenset({GIT_DIR_NAME, DATA_DIR_NAME})


class AgentUserError(AdeError):
    """The agent user cannot be used for this session."""


@dataclass(frozen=True)
class AgentUser:
    """An unprivileged user to run agent processes as."""

    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def named(cls, spec: str, *, worker_uid: int | None = None) -> AgentUser | None:
        """The user `spec` names (a name or a uid); None when it is the worker's own user."""
        worker_uid = os.geteuid() if worker_uid is None else worker_uid
        try:
            entry = pwd.getpwuid(int(spec)) if spec.isdigit() else pwd.getpwnam(spec)
        except KeyError:
            raise AgentUserError(
                f"{SETTING}={spec!r}: no such user on this worker; create it "
                f"(useradd --system --no-create-home {spec}) or unset {SETTING}"
            ) from None
        if entry.pw_uid == worker_uid:
            return None
        if entry.pw_uid == 0:
            raise AgentUserError(
                f"{SETTING}={spec!r} is root; name an unprivileged user or unset {SETTING}"
            )
        if worker_uid != 0:
            raise AgentUserError(
                f"{SETTING}={spec!r}: only a worker running as root can start processes as "
                f"another user (this one runs as uid {worker_uid}); run the worker as root or "
                f"unset {SETTING}"
            )
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)

    @property
    def ids(self) -> tuple[int, int]:
        return self.uid, self.gid

    def env(self, worktree: Path) -> dict[str, str]:
        """What the user's processes get on top of the allow-listed environment: who they are,
        and the one repository their git may read although the worker owns it."""
        return {
            "HOME": self.home,
            "USER": self.name,
            "LOGNAME": self.name,
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "safe.directory",
            "GIT_CONFIG_VALUE_0": os.path.realpath(worktree),
        }

    def open_worktree(self, worktree: Path, protected: ProtectedPaths) -> None:
        """Make what the agent may change in `worktree` the user's, and keep the rest the
        worker's where the user cannot move it.

        Every file and directory becomes the user's, except the engine's: `.git` and `.ade` at
        any depth, the engine's data files (matched by name and by identity, so a renamed one is
        still recognised), symlinks and files with a second link. The worktree itself and every
        directory on the way to an engine entry stay the worker's, open to the user's group and
        sticky: the user may add, change and remove its own entries there, never rename or
        replace the worker's, and no directory of the worker's can be moved. So every directory
        the user can move is its own, and git (which trusts a repository only if its owner runs
        it) never takes one for the worker's; the worker's git also never discovers a bare
        repository (`safe.bareRepository=explicit`), which an agent could assemble inside a
        directory of the worker's that it may write into.

        Walked with directory descriptors (`os.fwalk`) and entries opened with O_NOFOLLOW, so a
        symlink swapped in meanwhile leads nowhere."""
        real = Path(os.path.realpath(worktree))
        self.check_reachable(real, "the worktree")
        engine = {path for path, _ in protected.engine_data}
        kept = _identities([*engine, *(str(real / name) for name in _SKIPPED_NAMES)])
        shared = _paths_to_engine_entries(real, engine, kept)
        for dirpath, dirnames, filenames, dirfd in os.fwalk(real):
            if _identity(os.fstat(dirfd)) in kept:
                dirnames[:] = []
                continue
            if dirpath in shared:
                _share(dirfd, self.gid)
            else:
                _give(dirfd, self, kept)
            dirnames[:] = [name for name in dirnames if not _is_engine(dirpath, name, engine)]
            for name in filenames:
                if not _is_engine(dirpath, name, engine):
                    _give_entry(name, dirfd, self, kept)

    @contextmanager
    def file_access(self) -> Iterator[None]:
        """While inside, this thread's file access is checked as the user's, not the worker's.

        For the file tools the worker runs itself for an HTTP session (read_file, write_file,
        grep...): they then reach no more than the agent's own commands do, even through a path
        component an agent process swapped for a symlink after the engine's checks, and what
        they create is the user's. Linux keeps a filesystem uid and gid and the supplementary
        groups per thread; setfsuid/setfsgid and the raw setgroups system call change only
        the calling thread's (glibc's setgroups() would change every thread's); a thread
        started inside inherits them, so the tools start none."""
        groups, worker = os.getgroups(), (os.geteuid(), os.getegid())
        try:
            _set_thread_groups([])
            _set_fs_ids(self.uid, self.gid)
            yield
        finally:
            _set_fs_ids(*worker)
            _set_thread_groups(groups)

    def hand_over(self, *paths: Path) -> None:
        """Make the session's private directories and files the user's."""
        for path in paths:
            os.chown(path, self.uid, self.gid, follow_symlinks=False)

    def check_reachable(self, path: Path, what: str) -> None:
        """Raise unless the user may search every directory from / down to `path`."""
        for directory in (*reversed(path.parents), path):
            if not self._may(os.stat(directory), stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
                raise AgentUserError(self._unreachable(what, path, directory))

    def python(self, candidates: Iterable[str] = ()) -> str:
        """A Python interpreter the user may run (the worker's, if it may): the Claude hook
        runs as the user."""
        found = shutil.which("python3") or ""
        for candidate in (*candidates, sys.executable, found, *SYSTEM_PYTHONS):
            if candidate and self.may_run(candidate):
                return candidate
        raise AgentUserError(
            f"{SETTING}={self.name!r} may not run {sys.executable} or any python3 on PATH "
            "(Claude's tool-call hook runs as that user); install Python where it may "
            "(e.g. /usr/bin/python3) or unset " + SETTING
        )

    def may_read(self, path: str) -> bool:
        """May the user read `path` (list it, for a directory) as it is now?"""
        target = Path(path)
        try:
            self.check_reachable(target.parent, path)
            st = os.stat(target)
        except (AgentUserError, OSError):  # out of reach, or not there
            return False
        return self._may(st, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)

    def may_run(self, program: str) -> bool:
        """May the user execute `program`: reach it as named and where it leads, and run it?"""
        named, real = Path(os.path.abspath(program)), Path(os.path.realpath(program))
        try:
            self.check_reachable(named.parent, program)
            self.check_reachable(real.parent, program)
            mode = os.stat(real)
        except (AgentUserError, OSError):
            return False
        return self._may(mode, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)

    def _may(self, st: os.stat_result, as_owner: int, as_group: int, as_other: int) -> bool:
        if st.st_uid == self.uid:
            return bool(st.st_mode & as_owner)
        if st.st_gid == self.gid:
            return bool(st.st_mode & as_group)
        return bool(st.st_mode & as_other)

    def _unreachable(self, what: str, path: Path, directory: Path) -> str:
        mode = stat.S_IMODE(os.stat(directory).st_mode)
        hint = (
            f"set ADE_LANES_ROOT to a directory outside the data directory that {self.name} "
            "may enter"
            if DATA_DIR_NAME in path.parts
            else f"put it where {self.name} may enter every directory above it"
        )
        return (
            f"{SETTING}={self.name!r} cannot reach {what} {path}: {directory} (mode "
            f"{mode:04o}) does not let it in; {hint}, or unset {SETTING}"
        )


@dataclass(frozen=True)
class AgentUsers:
    """The agent users of this worker (`ADE_AGENT_USER=ade-agent1,ade-agent2`): each session
    leases one that no other session on this machine holds, in any worker process.

    Sessions of one user are not isolated from each other: each could read the other's private
    home and environment (its model-proxy token), connect to its decision socket, or ptrace its
    processes. So name at least as many users as agent sessions can run at once on a machine
    (the agent workers' concurrency); with fewer, a session waits for a free one until its
    deadline. Leases are `flock`s on files in a directory only the worker may enter, so a
    worker that dies releases them."""

    users: tuple[AgentUser, ...]
    locks: Path
    """Where the lease files are: the worker's data directory, which no agent user may enter
    (and which every worker of a machine, or of a shared volume, sees)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> AgentUsers | None:
        """The configured agent users, or None when agents run as the worker."""
        names = [name.strip() for name in (settings.agent_user or "").split(",") if name.strip()]
        users = [user for name in names if (user := AgentUser.named(name)) is not None]
        if len({user.uid for user in users}) != len(users):
            raise AgentUserError(f"{SETTING} names one user twice: {settings.agent_user!r}")
        return cls(tuple(users), settings.data_dir / "agent-leases") if users else None

    @contextmanager
    def lease(
        self, deadline: float, should_stop: Callable[[], bool] = lambda: False
    ) -> Iterator[AgentUser]:
        """A user no other session holds, for as long as the context is open; waits for one
        until `deadline` (time.monotonic) or until `should_stop()`."""
        directory = _lock_directory(self.locks)
        while True:
            for user in self.users:
                fd = os.open(directory / f"{user.uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                try:
                    yield user
                    return
                finally:
                    os.close(fd)  # releases the lease
            if should_stop():
                raise AgentUserError("stopped while waiting for a free agent user")
            if time.monotonic() >= deadline:
                names = ", ".join(user.name for user in self.users)
                raise AgentUserError(
                    f"every agent user ({names}) is busy with another session on this machine "
                    f"until the step's deadline; name more users in {SETTING} or run fewer "
                    "agent sessions at once (worker concurrency)"
                )
            time.sleep(LEASE_POLL_SECONDS)


def _lock_directory(directory: Path) -> Path:
    """The worker's own directory of lease files (0700), refused if anyone else made it."""
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700, parents=True)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise AgentUserError(
            f"{directory} is not a private directory of the worker's (someone else made it, or "
            "it is open to others); remove it so the worker can create it"
        )
    return directory


_libc = ctypes.CDLL(None, use_errno=True)
#: setgroups(2) by number: glibc's wrapper would apply it to every thread of the worker.
_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159}.get(platform.machine())


def _set_fs_ids(uid: int, gid: int) -> None:
    """This thread's filesystem uid and gid (setfsuid reports no error: read it back)."""
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    if _libc.setfsuid(-1) != uid or _libc.setfsgid(-1) != gid:
        raise AgentUserError(f"could not switch this thread's file access to uid {uid}/{gid}")


def _set_thread_groups(groups: list[int]) -> None:
    if _SYS_SETGROUPS is None:
        raise AgentUserError(f"{SETTING} is not supported on {platform.machine()}")
    array = (ctypes.c_uint * max(len(groups), 1))(*groups)
    if _libc.syscall(_SYS_SETGROUPS, len(groups), array) != 0:
        raise AgentUserError(f"setgroups failed: {os.strerror(ctypes.get_errno())}")


def _is_engine(directory: str, name: str, engine: set[str]) -> bool:
    return name.lower() in _SKIPPED_NAMES or os.path.join(directory, name) in engine


def _paths_to_engine_entries(top: Path, engine: set[str], kept: set[tuple[int, int]]) -> set[str]:
    """`top` and every directory below it that holds an engine entry or leads to one."""
    shared = {str(top)}
    for dirpath, dirnames, filenames, dirfd in os.fwalk(top):
        if _identity(os.fstat(dirfd)) in kept:
            dirnames[:] = []
            continue
        if any(_is_engine(dirpath, name, engine) for name in (*dirnames, *filenames)):
            directory = Path(dirpath)
            while directory != top and str(directory) not in shared:
                shared.add(str(directory))
                directory = directory.parent
        dirnames[:] = [name for name in dirnames if not _is_engine(dirpath, name, engine)]
    return shared


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _identities(paths: Iterable[str]) -> set[tuple[int, int]]:
    """The (device, inode) of each of `paths` that exists."""
    found = set()
    for path in paths:
        try:
            found.add(_identity(os.lstat(path)))
        except OSError:
            continue
    return found


def _give_entry(name: str, dirfd: int, user: AgentUser, kept: set[tuple[int, int]]) -> None:
    """`_give` the regular file `name` (relative to `dirfd`), never through a symlink;
    anything else (gone, a symlink, a fifo) is left alone."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dirfd)
    except OSError:
        return
    try:
        _give(fd, user, kept)
    finally:
        os.close(fd)


def _give(fd: int, user: AgentUser, kept: set[tuple[int, int]]) -> None:
    """Make the open directory or regular file `fd` the user's (chown clears setuid and setgid
    bits). A file with several links is left alone: its other name may lie outside the
    worktree (a hard link an agent made to a file it could not write)."""
    st = os.fstat(fd)
    if _identity(st) in kept:
        return
    if stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
        if (st.st_uid, st.st_gid) != user.ids:
            os.fchown(fd, user.uid, user.gid)


def _share(fd: int, gid: int) -> None:
    """Open the worker's directory `fd` to group `gid` (rwx), sticky: members add and remove
    their own entries, never the worker's."""
    st = os.fstat(fd)
    if st.st_gid != gid:
        os.fchown(fd, -1, gid)
    wanted = stat.S_IRWXG | stat.S_ISVTX
    if st.st_mode & wanted != wanted:
        os.fchmod(fd, stat.S_IMODE(st.st_mode) | wanted)
