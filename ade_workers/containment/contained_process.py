"""The worker's end of command containers: a command handed to a supervisor, and the
supervisors a worker process keeps.

`ContainedProcess` hands a command to a supervisor (`ade_workers.containment.supervisor`, which says
what a container guarantees) and reads how it ended. A supervisor serves one command at a time
and is reused: a worker process keeps up to `MAX_IDLE` idle ones, so a short command costs one
round trip on a socket, not the ~8 ms a fresh Python takes to start (`true` itself takes
~1 ms). Forking the worker instead would run Python in a copy of a multithreaded process and pin
a copy-on-write snapshot of the worker's memory for as long as the command runs.

A supervisor may itself run somewhere else, given a `Launcher` (inside a sandbox:
`ade_workers.containment.process.SandboxedSupervisor`): the launcher's command line starts it there,
with no environment of the worker's, and its commands run there too. Idle supervisors are
reused only for the same launcher, and one idle longer than `MAX_IDLE_SECONDS` is closed rather
than reused, so a sandbox never outlives by much the directories it was made from. A command in
a sandbox made for it alone (an agent CLI's session) asks for no reuse (`reuse=False`): its
supervisor, and so its sandbox, ends with it instead of waiting for an equal launcher.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from ade_workers.containment import supervisor
from ade_workers.containment.supervisor import Message

#: Idle supervisors a worker process keeps for its next commands.
MAX_IDLE = 4
#: A launched supervisor (in a sandbox) idle longer than this is closed, not reused.
MAX_IDLE_SECONDS = 30.0


class Launcher(Protocol):
    """Where a supervisor runs: the command line that starts one there. Hashable: supervisors
    started by equal launchers are interchangeable."""

    def launch(self, fd: int) -> list[str]:
        """The command line that starts a supervisor there (this file's program, run as
        `python -I -S supervisor.py FD`) serving the socket at descriptor `fd`."""
        ...

    def __hash__(self) -> int: ...


class ContainedProcess:
    """A command running in a container of its own, as the worker sees it."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        kill_grace: float,
        stdin: bool = False,
        separate_stderr: bool = False,
        user: tuple[int, int] | None = None,
        launcher: Launcher | None = None,
        reuse: bool = True,
    ) -> None:
        # False: the supervisor ends with the command rather than wait idle for an equal
        # launcher's next one (a sandbox made for one session: nothing will ask for it again).
        self._reuse = reuse
        request = {
            "argv": [os.fspath(arg) for arg in argv],
            "cwd": cwd,
            "env": dict(env),
            "grace": kill_grace,
            "stdin": stdin,
            "stderr": separate_stderr,
            "user": list(user) if user else None,  # (uid, gid) to run the command as
        }
        # The child's ends ride to the supervisor in this order: output, [stdin], [stderr].
        ours: list[int] = []
        theirs: list[int] = []
        try:
            out_r, out_w = os.pipe()
            ours.append(out_r)
            theirs.append(out_w)
            if stdin:
                in_r, in_w = os.pipe()
                ours.append(in_w)
                theirs.append(in_r)
            if separate_stderr:
                err_r, err_w = os.pipe()
                ours.append(err_r)
                theirs.append(err_w)
            self._link: _Link | None = _hand_over(request, theirs, launcher)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        fds = iter(ours)
        #: The command's stdout (and stderr, unless `separate_stderr`); EOF once nothing of it
        #: is left.
        self.output: io.BufferedReader = os.fdopen(next(fds), "rb")
        #: The command's stdin when asked for (`stdin=True`); close it to send EOF.
        self.stdin: io.BufferedWriter | None = os.fdopen(next(fds), "wb") if stdin else None
        #: The command's stderr when asked for (`separate_stderr=True`).
        self.stderr: io.BufferedReader | None = (
            os.fdopen(next(fds), "rb") if separate_stderr else None
        )

    def __enter__(self) -> ContainedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self._abandon()  # still running (the caller raised): its supervisor kills it all

    def wait(self, timeout: float) -> bool:
        """Has the command ended, with nothing of it left?"""
        assert self._link is not None
        readable, _, _ = select.select([self._link.socket], [], [], max(timeout, 0))
        return bool(readable)

    @property
    def ended_fd(self) -> int:
        """A descriptor that turns readable once the command has ended, with nothing of it left
        (for a caller's own `select`, beside the command's output)."""
        assert self._link is not None
        return self._link.socket.fileno()

    def stop(self) -> None:
        """End the command: TERM to all of it, then KILL after the kill grace."""
        assert self._link is not None
        with contextlib.suppress(OSError):  # its supervisor is gone; finish() says so
            self._link.send({"stop": True})

    def finish(self) -> int | None:
        """Wait until nothing of the command is left; its exit code (negative: the signal that
        ended it), or raise the OSError that kept it from starting."""
        link, self._link = self._link, None
        assert link is not None
        try:
            outcome = link.receive()
        except OSError:
            outcome = None
        if outcome is None or outcome.get("retire") or not self._reuse:
            _links.discard(link)
        else:
            _links.give_back(link)
        if outcome is None:
            raise ChildProcessError(
                errno.ECHILD, "the command's supervisor ended without saying how (was it killed?)"
            )
        if "errno" in outcome:
            raise OSError(outcome["errno"], outcome["strerror"], outcome["filename"])
        if "error" in outcome:
            raise ValueError(outcome["error"])
        return outcome["exit"]  # type: ignore[no-any-return]

    def _abandon(self) -> None:
        if self._link is not None:
            _links.discard(self._link)
            self._link = None


def _hand_over(request: Message, fds: Sequence[int], launcher: Launcher | None) -> _Link:
    """Give a command to an idle supervisor, or to a fresh one if that one has died meanwhile."""
    for attempt in range(2):
        link = _links.take(launcher)
        try:
            link.send(request, fds)
            return link
        except BaseException as exc:
            _links.discard(link)
            if attempt or not isinstance(exc, OSError):
                raise
    raise AssertionError("unreachable")


class _Link:
    """The worker's end of one supervisor process."""

    def __init__(self, launcher: Launcher | None = None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with theirs:
            argv = [sys.executable, "-I", "-S", supervisor.__file__, str(theirs.fileno())]
            self.process = subprocess.Popen(
                argv if launcher is None else launcher.launch(theirs.fileno()),
                pass_fds=[theirs.fileno()],
                cwd="/",
                # Elsewhere its processes may read its environment (/proc/PID/environ): it gets
                # none of the worker's. Each command gets the environment its request names.
                env=None if launcher is None else {},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # a kill of the worker's process group must miss it
            )
        self.socket = ours
        self.launcher = launcher
        self.idle_since = 0.0

    def send(self, message: Message, fds: Sequence[int] = ()) -> None:
        supervisor.send_message(self.socket, message, fds)

    def receive(self) -> Message | None:
        message, fds = supervisor.receive_message(self.socket)
        for fd in fds:
            os.close(fd)
        return message

    def close(self) -> None:
        self.socket.close()  # EOF: the supervisor kills what it holds and exits

    def exited(self) -> bool:
        return self.process.poll() is not None  # and reaped


class _Links:
    """This worker process's supervisors: idle ones are reused, one per running command; closed
    ones are reaped once they have exited.

    A forked child of the worker forgets them all (closing its copies of their sockets), so
    the worker's death still reaches them as EOF and the child starts supervisors of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Link] = []
        self._all: set[_Link] = set()
        self._closed: list[_Link] = []

    def take(self, launcher: Launcher | None = None) -> _Link:
        stale = time.monotonic() - MAX_IDLE_SECONDS
        found: _Link | None = None
        with self._lock:
            self._closed = [link for link in self._closed if not link.exited()]
            for link in reversed(list(self._idle)):  # the most recently used first
                if link.exited() or (link.launcher is not None and link.idle_since < stale):
                    self._drop(link)
                elif found is None and link.launcher == launcher:
                    found = link
            if found is not None:
                self._idle.remove(found)
                return found
        link = _Link(launcher)
        with self._lock:
            self._all.add(link)
        return link

    def give_back(self, link: _Link) -> None:
        link.idle_since = time.monotonic()
        with self._lock:
            self._idle.append(link)
            if len(self._idle) > MAX_IDLE:  # the least recently used goes
                self._drop(self._idle[0])

    def _drop(self, link: _Link) -> None:
        """Close an idle supervisor (under the lock)."""
        self._idle.remove(link)
        self._all.discard(link)
        self._closed.append(link)
        link.close()

    def discard(self, link: _Link) -> None:
        link.close()
        with self._lock:
            self._all.discard(link)
            self._closed.append(link)

    def forget(self) -> None:
        for link in self._all:
            link.socket.close()
        self._lock = threading.Lock()
        self._idle, self._all, self._closed = [], set(), []


_links = _Links()
os.register_at_fork(after_in_child=_links.forget)
