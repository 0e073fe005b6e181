"""The unprivileged user agent sessions run as, when the operator names one (`ADE_AGENT_USER`).

With it set, every process of an agent session runs as that user (its uid, its primary group,
no supplementary groups): a CLI (claude, codex) with its hooks and tools, and each `bash` call of
an HTTP session. The engine's policy already refuses agents the engine's data and `.git`
internals; with an agent user the operating system refuses them too, to whatever a shell
command does: the data directory (0700, the worker's), the API token file, a 0600 secrets file,
the repository's `.git` (the worker's, never made writable).

What the engine does for a session (`AgentUser.open_worktree`):
- checks that the user can reach the worktree: every directory above it must let the user in
  (search permission as owner, group or other). A lane under the 0700 data directory cannot be
  reached, so with an agent user lanes go under `ADE_LANES_ROOT`;
- gives the user's group read and write access to the worktree: every directory and file below
  it gets the group and g+rw (directories g+rwx and setgid, so what the agent creates keeps the
  group), except `.git` and `.ade` at any depth, the engine's data files and symlinks. Owners
  are left alone, so git run by the worker still sees the worktree as its own; the agent's git
  reads the repository through `safe.directory` (set in its environment, for this worktree only)
  and cannot write it. Changing only group and mode leaves `git status` clean;
- hands the session's private home, config directory and decision socket to the user (chown).

`run-command` and `run-tests` steps are the rule author's own commands and keep running as the
worker. Switching users needs a worker running as root; naming the worker's own user changes
nothing, and naming root or an unknown user is refused at the first session with the reason.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ade_tasks.agents.protected import DATA_DIR_NAME, GIT_DIR_NAME, ProtectedPaths
from ade_tasks.errors import AdeError
from ade_tasks.settings import Settings

SETTING = "ADE_AGENT_USER"
#: Where a Python the agent user may run is looked for after the worker's own (a virtualenv
#: in a home directory is out of its reach).
SYSTEM_PYTHONS = ("/usr/local/bin/python3", "/usr/bin/python3")
_SKIPPED_NAMES = frozenset({GIT_DIR_NAME, DATA_DIR_NAME})
_DIR_BITS = stat.S_IRWXG | stat.S_ISGID
_FILE_BITS = stat.S_IRGRP | stat.S_IWGRP


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
    def from_settings(cls, settings: Settings) -> AgentUser | None:
        """The configured agent user, or None when agents run as the worker."""
        return cls.named(settings.agent_user) if settings.agent_user else None

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
        """Let the user into `worktree` and give its group read and write access there.

        Walked with directory descriptors (`os.fwalk`) and files opened with O_NOFOLLOW, so a
        symlink swapped in meanwhile (by another session of the same user) leads nowhere."""
        real = Path(os.path.realpath(worktree))
        self.check_reachable(real, "the worktree")
        engine_data = {path for path, _ in protected.engine_data}
        for dirpath, dirnames, filenames, dirfd in os.fwalk(real):
            dirnames[:] = [
                name
                for name in dirnames
                if name.lower() not in _SKIPPED_NAMES
                and os.path.join(dirpath, name) not in engine_data
            ]
            _grant(dirfd, self.gid)
            for name in filenames:
                # A lane's `.git` is a file that points at the repository: it stays the worker's.
                if (
                    name.lower() not in _SKIPPED_NAMES
                    and os.path.join(dirpath, name) not in engine_data
                ):
                    _grant_entry(name, dirfd, self.gid)

    def adopt(self, path: Path, worktree: Path) -> None:
        """Give the group access to `path`, written by the worker for the agent (an HTTP
        session's write_file), and to the directories made for it up to `worktree`."""
        top = os.path.realpath(worktree)
        current = os.path.realpath(path)
        while current.startswith(top + os.sep):
            _grant_entry(current, None, self.gid)
            current = os.path.dirname(current)

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


def _grant_entry(name: str, dirfd: int | None, gid: int) -> None:
    """`_grant` on the directory or regular file `name` (relative to `dirfd`), never through
    a symlink; anything else (gone, a symlink, a fifo) is left alone."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dirfd)
    except OSError:
        return
    try:
        _grant(fd, gid)
    finally:
        os.close(fd)


def _grant(fd: int, gid: int) -> None:
    """Give group `gid` read and write access to the open directory or regular file `fd`.

    Directories get g+rwx and setgid; files g+rw, and g+x where the owner has x, minus any
    setuid/setgid bit. A file with several links is left alone: the other link may lead out
    of the worktree (a hard link an agent made to a file it could not write)."""
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        wanted = _DIR_BITS
        mode = stat.S_IMODE(st.st_mode)
    elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
        wanted = _FILE_BITS | (stat.S_IXGRP if st.st_mode & stat.S_IXUSR else 0)
        mode = stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
    else:
        return
    if st.st_gid != gid:
        os.fchown(fd, -1, gid)
    if mode | wanted != stat.S_IMODE(st.st_mode):
        os.fchmod(fd, mode | wanted)
