"""Run a command in a container of its own, with a deadline, capped output and a clean kill.

Everything the command starts stays in its container (`ade_workers.containment.supervisor`),
daemons that left its session with `setsid` or a double fork included. All of it is killed
(TERM, then KILL after a grace period) on timeout or cancellation, at once after a normal exit,
and within a few seconds when the worker dies, so a step's processes never outlive the step or
its worker.
Output is read in chunks into a head + tail buffer, so a command printing gigabytes keeps the
worker's memory flat. Given a `Masker`, secrets are masked as the chunks arrive, before the
capping, so neither a chunk boundary nor the cap boundary can let part of a secret through.
"""

from __future__ import annotations

import codecs
import io
import os
import select
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ade_tasks.secrets import Masker, StreamMasker
from ade_workers.containment import supervisor
from ade_workers.containment.contained_process import ContainedProcess
from ade_workers.sandbox import helpers
from ade_workers.sandbox.layout import Sandbox

#: The supervisor's program as a sandbox runs it: an engine-owned copy (the sandbox hides the
#: engine's source).
SUPERVISOR = helpers.register(supervisor.__file__)
OUTPUT_CAP = 80_000
STOP_CHECK_INTERVAL = 0.25
_CHUNK = 64 * 1024


class CappedOutput:
    """Keeps the first and last `cap // 2` characters of a stream and counts what it dropped."""

    def __init__(self, cap: int = OUTPUT_CAP) -> None:
        self._head_cap = cap // 2
        self._tail_cap = cap - self._head_cap
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self.dropped = 0

    def write(self, text: str) -> None:
        if self._head_len < self._head_cap:
            take = text[: self._head_cap - self._head_len]
            self._head.append(take)
            self._head_len += len(take)
            text = text[len(take) :]
        if not text:
            return
        self._tail.append(text)
        self._tail_len += len(text)
        while self._tail_len - len(self._tail[0]) >= self._tail_cap:
            self.dropped += len(self._tail[0])
            self._tail_len -= len(self._tail.popleft())
        if self._tail_len > self._tail_cap:  # trim the oldest chunk to fit exactly
            excess = self._tail_len - self._tail_cap
            self._tail[0] = self._tail[0][excess:]
            self._tail_len -= excess
            self.dropped += excess

    def text(self) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        if self.dropped:
            return f"{head}\n[... {self.dropped} characters omitted ...]\n{tail}"
        return head + tail


@dataclass(frozen=True)
class ProcessResult:
    """How a command ended."""

    exit_code: int | None
    output: str
    timed_out: bool
    cancelled: bool
    duration: float


def group_alive(pgid: int) -> bool:
    """Does any process of the group still exist?"""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    kill_grace: float = 3.0,
    should_stop: Callable[[], bool] = lambda: False,
    cap: int = OUTPUT_CAP,
    masker: Masker | None = None,
    user: tuple[int, int] | None = None,
    sandbox: Sandbox | None = None,
    on_output: Callable[[str], None] | None = None,
    on_tick: Callable[[], None] | None = None,
    reuse: bool = True,
) -> ProcessResult:
    """Run `argv` to completion or until `timeout` / `should_stop()`; stdout and stderr merged.
    `user` is the (uid, gid) to run it as; the worker's own by default. With a `sandbox` it
    runs inside it: under a supervisor that runs in that sandbox and is reused by the next
    command in an equal one (a `true` costs a round trip, not a sandbox), or, with a `user`,
    in a sandbox of its own under a supervisor outside (that one's container holds the
    sandbox's processes). `on_output` gets the output as it arrives (decoded and masked,
    before the cap), for a caller that follows it; `on_tick` is called between reads, at least
    every `STOP_CHECK_INTERVAL`, so such a caller can pass on what it gathered. `reuse=False`
    ends the supervisor (and its sandbox) with the command: for a sandbox made for this command
    alone (an agent CLI's, with the session's private directories), which no later command asks
    for.

    The calling thread reads the output while it waits (one `select` on the output and the
    supervisor's socket), so a command costs no reader thread: a thread's start and join were
    a tenth of a `true` step's time, more on a loaded machine."""
    started = time.monotonic()
    launcher = None
    if sandbox is not None and user is None:
        launcher = SandboxedSupervisor(sandbox)
    elif sandbox is not None:  # the supervisor stays outside, the worker's, to run it as `user`
        argv = sandbox.command(argv, str(cwd))
    with ContainedProcess(
        argv,
        cwd=str(cwd),
        env=env,
        kill_grace=kill_grace,
        user=user,
        launcher=launcher,
        reuse=reuse,
    ) as process:
        output = _Drain(
            process.output,
            CappedOutput(cap),
            StreamMasker(masker) if masker else None,
            on_output,
        )
        try:
            deadline = started + timeout
            timed_out = cancelled = False
            while not _wait_reading(process, output, deadline - time.monotonic()):
                if on_tick is not None:
                    on_tick()
                if time.monotonic() >= deadline:
                    timed_out = True
                    break
                if should_stop():
                    cancelled = True
                    break
            if timed_out or cancelled:
                process.stop()
            exit_code = process.finish()  # returns once nothing of the command is left
        except BaseException:
            output.close()  # the container is abandoned below: its supervisor kills it all
            raise
        output.finish(time.monotonic() + DRAIN_AFTER_END)
    return ProcessResult(
        exit_code=None if (timed_out or cancelled) else exit_code,
        output=output.captured.text(),
        timed_out=timed_out,
        cancelled=cancelled,
        duration=time.monotonic() - started,
    )


@dataclass(frozen=True)
class SandboxedSupervisor:
    """A supervisor inside `sandbox` (a `Launcher`), run from the engine's copy of its program,
    checked against its hash whenever one starts."""

    sandbox: Sandbox

    def launch(self, fd: int) -> list[str]:
        return self.sandbox.launch(SUPERVISOR.installed(), fd)


#: How long the output is still read after the command's container emptied (its pipe is at
#: EOF by then, unless a process passed it on to something outside the container).
DRAIN_AFTER_END = 5.0


def _wait_reading(process: ContainedProcess, output: _Drain, timeout: float) -> bool:
    """Has the command ended (within `timeout`, at most `STOP_CHECK_INTERVAL`)? Its output is
    read meanwhile; a command that never stops printing still returns after the interval, so
    its deadline, its cancel and the caller's tick are seen."""
    until = time.monotonic() + max(min(timeout, STOP_CHECK_INTERVAL), 0)
    while True:
        watched = [process.ended_fd, output.fd] if output.open else [process.ended_fd]
        readable, _, _ = select.select(watched, [], [], max(until - time.monotonic(), 0))
        if output.open and output.fd in readable:
            output.read()
        if process.ended_fd in readable:
            return True
        if not readable or time.monotonic() >= until:
            return False


class _Drain:
    """The command's output pipe, read chunk by chunk into a capped buffer (masked as it
    arrives, when given a stream masker)."""

    def __init__(
        self,
        stream: io.BufferedReader,
        captured: CappedOutput,
        masking: StreamMasker | None,
        follow: Callable[[str], None] | None = None,
    ) -> None:
        self._stream = stream
        self.fd = stream.fileno()
        self.captured = captured
        self._masking = masking
        self._follow = follow
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.open = True

    def read(self) -> None:
        """Take what the pipe holds (call when it is readable); at EOF, close it."""
        chunk = os.read(self.fd, _CHUNK)
        if chunk:
            self._write(_printable(self._decoder.decode(chunk)))
            return
        rest = _printable(self._decoder.decode(b"", final=True))
        self._write(rest)
        if self._masking:
            self._keep(self._masking.flush())
        self.close()

    def finish(self, until: float) -> None:
        """Read to EOF, or until `until` (monotonic) if the pipe stays open; then close it."""
        while self.open:
            ready, _, _ = select.select([self.fd], [], [], max(until - time.monotonic(), 0))
            if not ready:
                self.close()
                return
            self.read()

    def close(self) -> None:
        self.open = False
        self._stream.close()

    def _write(self, text: str) -> None:
        self._keep(self._masking.feed(text) if self._masking else text)

    def _keep(self, text: str) -> None:
        self.captured.write(text)
        if self._follow is not None and text:
            self._follow(text)


def _printable(text: str) -> str:
    # PostgreSQL text cannot hold NUL; binary output is shown as replacement characters.
    return text.replace("\x00", "\ufffd")
