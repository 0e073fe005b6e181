"""Containers for commands: nothing a command starts can leave, and nothing outlives its worker.

`run_process` runs every command under a *supervisor*: a small Python process (`python -I -S
supervisor.py FD`, in a session of its own), a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`)
that starts the command in a session of its own. A descendant that leaves the command's session
or process group (`setsid -f`, a double-fork daemon) is still a descendant: when its parent dies
it is reparented to the supervisor, not to init. So
"the supervisor has no children left" means "nothing of the command is left" (the *container* is
empty), and the supervisor can kill all of it: TERM to every process of its tree (walked from
/proc), KILL after the grace, and again until no child is left, reaping as it goes.

The supervisor ends the command's container when
- the command exits: whatever it left behind is killed at once (TERM, then KILL);
- the worker asks it to (timeout, cancel, shutdown): TERM, then KILL after the kill grace;
- the worker process dies, however it died and from whichever thread it called: the other end of
  the supervisor's socket lives only in the worker process, so EOF on it means the worker is gone
  (PR_SET_PDEATHSIG would instead fire when the *thread* that started it exits). TERM, then KILL
  after at most `WORKER_LOST_GRACE` seconds, and the supervisor exits;
- it is sent SIGTERM, SIGINT or SIGHUP itself (a service manager stopping everything).
Only then does it report how the command ended: when `ContainedProcess.finish` returns, nothing
of it is left (or the reason it could not start).

A command may run as another user (`user=(uid, gid)`, no supplementary groups): the supervisor
stays the worker's, so it still sees and kills all of it.

The command's stdout and stderr share one pipe and its stdin is /dev/null, unless the caller opts
in (`stdin=True`, `separate_stderr=True`, e.g. `codex app-server`): those pipes ride the request.

A supervisor serves one command at a time and is reused: a worker process keeps up to
`MAX_IDLE` idle ones, so a short command costs one round trip on a socket, not the ~8 ms a fresh
Python takes to start (`true` itself takes ~1 ms). Forking the worker instead would run Python in a
copy of a multithreaded process and pin a copy-on-write snapshot of the worker's memory for as long
as the command runs.

Needs Linux (prctl, /proc), no privileges. A subreaper cannot stop a command that SIGKILLs its
own supervisor (its parent): what it started goes to the next subreaper (tini, systemd); agent
processes run in a sandbox's PID namespace (`ade_workers.sandbox`), which that cannot leave.

This file uses the standard library only: it is also the supervisor's main program, run with no
site packages and no environment variables (`-I -S`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

#: Idle supervisors a worker process keeps for its next commands.
MAX_IDLE = 4
#: Between TERM and KILL when the worker died (its own kill grace, if shorter, applies).
WORKER_LOST_GRACE = 2.0
#: How long a supervisor keeps sending KILL to processes that do not die (uninterruptible sleep).
KILL_DEADLINE = 5.0
_PR_SET_CHILD_SUBREAPER = 36

Message = dict[str, Any]


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
    ) -> None:
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
            self._link: _Link | None = _hand_over(request, theirs)
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
        if outcome is None or outcome.get("retire"):
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


def _hand_over(request: Message, fds: Sequence[int]) -> _Link:
    """Give a command to an idle supervisor, or to a fresh one if that one has died meanwhile."""
    for attempt in range(2):
        link = _links.take()
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

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", __file__, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # a kill of the worker's process group must miss it
            )
        self.socket = ours

    def send(self, message: Message, fds: Sequence[int] = ()) -> None:
        _send(self.socket, message, fds)

    def receive(self) -> Message | None:
        message, fds = _receive(self.socket)
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

    def take(self) -> _Link:
        with self._lock:
            self._closed = [link for link in self._closed if not link.exited()]
            while self._idle:
                link = self._idle.pop()
                if not link.exited():
                    return link
                self._all.discard(link)
                link.close()
        link = _Link()
        with self._lock:
            self._all.add(link)
        return link

    def give_back(self, link: _Link) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(link)
                return
        self.discard(link)

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


def _send(sock: socket.socket, message: Message, fds: Sequence[int] = ()) -> None:
    """One length-prefixed JSON message, with file descriptors riding on its first byte."""
    data = json.dumps(message).encode()
    frame = len(data).to_bytes(4, "big") + data
    sent = socket.send_fds(sock, [frame], list(fds)) if fds else sock.send(frame)
    sock.sendall(frame[sent:])


def _receive(sock: socket.socket) -> tuple[Message | None, list[int]]:
    """The next message and the file descriptors that came with it; None at EOF."""
    try:
        head, fds, _, _ = socket.recv_fds(sock, 4, 3)  # output, [stdin], [stderr]
        if head:
            head += _receive_exactly(sock, 4 - len(head))
        if len(head) < 4:
            return None, fds
        size = int.from_bytes(head, "big")
        body = _receive_exactly(sock, size)
    except ConnectionResetError:
        return None, []
    return (json.loads(body) if len(body) == size else None), fds


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    while size > 0 and (chunk := sock.recv(size)):
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class Supervisor:
    """The supervisor process: a child subreaper that runs one command at a time and leaves
    nothing of it behind."""

    def __init__(self, link: socket.socket) -> None:
        import ctypes

        self._link = link
        self._command = 0
        self._ended = False
        self._exit_code: int | None = None
        self._terminated = self._worker_lost = self._retired = False
        self._wake, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)  # every signal, SIGCHLD included, wakes a select
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_terminate)
        prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
        if prctl is None or prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(
                ctypes.get_errno() if prctl else errno.ENOSYS,
                "commands cannot be contained here: prctl(PR_SET_CHILD_SUBREAPER) needs Linux",
            )

    def serve(self) -> None:
        """Run the commands the worker sends until it is gone, or a container would not empty."""
        while not (self._terminated or self._retired):
            if not self._wait_for_link():
                continue
            request, fds = _receive(self._link)
            if request is None:
                return
            if "argv" in request and fds:
                self._run(request, fds)
            else:  # a stop that crossed the last command's report
                for fd in fds:
                    os.close(fd)

    def _run(self, request: Message, fds: list[int]) -> None:
        handed = iter(fds)
        out = next(handed)
        stdin = next(handed, None) if request.get("stdin") else None
        stderr = next(handed, None) if request.get("stderr") else None
        uid, gid = request.get("user") or (None, None)
        try:
            command = subprocess.Popen(
                request["argv"],
                cwd=request["cwd"],
                env=request["env"],
                stdin=subprocess.DEVNULL if stdin is None else stdin,
                stdout=out,
                stderr=subprocess.STDOUT if stderr is None else stderr,
                start_new_session=True,  # its own group and session: a killpg of it misses us
                # Another user: its uid, its primary group and none of ours (setgroups([])).
                user=uid,
                group=gid,
                extra_groups=None if uid is None else [],
            )
        except OSError as exc:
            self._report({"errno": exc.errno, "strerror": exc.strerror, "filename": exc.filename})
            return
        except (ValueError, TypeError) as exc:  # e.g. a NUL byte in an argument
            self._report({"error": str(exc)})
            return
        finally:
            for fd in fds:  # the command holds its copies; ours would keep its pipes open
                os.close(fd)
        self._command, self._ended, self._exit_code = command.pid, False, None
        self._kill_all(self._wait(float(request["grace"])))
        command.returncode = self._exit_code  # reaped by _reap, so Popen must not wait for it
        # A process that would not die (uninterruptible sleep) must not share a later container.
        self._retired = self._terminated or self._worker_lost or self._reap()
        self._report({"exit": self._exit_code, "retire": self._retired})

    def _wait(self, grace: float) -> float:
        """Block until the command exits (then 0: kill what it left at once) or a stop is asked
        for (then the grace before KILL)."""
        while True:
            self._reap()
            if self._ended:
                return 0.0
            if self._terminated:
                return grace
            if self._wait_for_link():
                message, _ = _receive(self._link)
                if message is None:
                    self._worker_lost = True
                    return min(grace, WORKER_LOST_GRACE)
                if message.get("stop"):
                    return grace

    def _kill_all(self, grace: float) -> None:
        """TERM every process in the container, wait up to `grace` for them to exit, then KILL
        whatever is left until nothing is."""
        if not self._reap():  # the usual case: nothing left, and no /proc walk needed
            return
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self._reap() and (left := deadline - time.monotonic()) > 0:
            self._sleep(left)
        deadline = time.monotonic() + KILL_DEADLINE
        while self._reap() and time.monotonic() < deadline:
            self._signal_all(signal.SIGKILL)
            self._sleep(0.02)  # a process forked meanwhile is found by the next walk

    def _reap(self) -> bool:
        """Reap every child that exited; is any process left in the container?

        A subreaper's children are all that can be left: a process whose parent died is
        reparented to us, so no children means an empty container."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self._command:
                self._ended = True
                self._exit_code = os.waitstatus_to_exitcode(status)

    def _signal_all(self, sig: signal.Signals) -> None:
        # Pids are handed out in turn, so one found by this walk is still that process when it
        # is signalled a moment later.
        for pid in _descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _wait_for_link(self) -> bool:
        """Wait for a message from the worker (True) or a signal (False)."""
        readable, _, _ = select.select([self._link.fileno(), self._wake], [], [])
        self._drain_wake()
        return self._link.fileno() in readable

    def _sleep(self, timeout: float) -> None:
        """Wait up to `timeout` seconds or until a signal (a child exited) arrives."""
        select.select([self._wake], [], [], timeout)
        self._drain_wake()

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake, 512):
                pass

    def _on_terminate(self, *_: object) -> None:
        self._terminated = True

    def _report(self, outcome: Message) -> None:
        with contextlib.suppress(OSError):  # the worker is gone: nobody to tell
            _send(self._link, outcome)


def _descendants(root: int) -> list[int]:
    """Every live process below `root`, from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def main(fd: int) -> None:
    """The supervisor process: contain commands, or refuse the first with the reason it cannot."""
    with socket.socket(fileno=fd) as link:
        try:
            supervisor = Supervisor(link)
        except OSError as exc:
            _, fds = _receive(link)
            for received in fds:
                os.close(received)
            refusal = {"errno": exc.errno, "strerror": exc.strerror, "filename": None}
            _send(link, {**refusal, "retire": True})
            return
        supervisor.serve()


if __name__ == "__main__":
    main(int(sys.argv[1]))
