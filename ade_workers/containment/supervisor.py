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

The worker's end (`ContainedProcess`, and the idle supervisors a worker keeps for reuse, here
or inside a sandbox) is `ade_workers.containment.contained_process`.

Needs Linux (prctl, /proc), no privileges. A subreaper cannot stop a command that SIGKILLs its
own supervisor (its parent): what it started goes to the next subreaper (tini, systemd). So
commands run in a sandbox (`ade_workers.sandbox`) whose PID namespace holds the supervisor too
and ends when it ends: there, nothing is left to go anywhere.

This file uses the standard library only: it is the supervisor's main program, run with no
site packages and no environment variables (`-I -S`), from an engine-owned copy in a sandbox.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:  # the standard library only at run time
    from ade_tasks.json_document import JsonObject

#: Between TERM and KILL when the worker died (its own kill grace, if shorter, applies).
WORKER_LOST_GRACE = 2.0
#: How long a supervisor keeps sending KILL to processes that do not die (uninterruptible sleep).
KILL_DEADLINE = 5.0
_PR_SET_CHILD_SUBREAPER = 36

Message: TypeAlias = "JsonObject"


def send_message(sock: socket.socket, message: Message, fds: Sequence[int] = ()) -> None:
    """One length-prefixed JSON message, with file descriptors riding on its first byte."""
    data = json.dumps(message).encode()
    frame = len(data).to_bytes(4, "big") + data
    sent = socket.send_fds(sock, [frame], list(fds)) if fds else sock.send(frame)
    sock.sendall(frame[sent:])


def receive_message(sock: socket.socket) -> tuple[Message | None, list[int]]:
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
            request, fds = receive_message(self._link)
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
                message, _ = receive_message(self._link)
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
            send_message(self._link, outcome)


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
            _, fds = receive_message(link)
            for received in fds:
                os.close(received)
            refusal = {"errno": exc.errno, "strerror": exc.strerror, "filename": None}
            send_message(link, {**refusal, "retire": True})
            return
        supervisor.serve()


if __name__ == "__main__":
    main(int(sys.argv[1]))
