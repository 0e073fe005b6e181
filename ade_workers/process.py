"""Run a command in its own process group, with a deadline, capped output and a clean kill.

The whole group is killed (TERM, then KILL after a grace period) on timeout or cancellation,
and also after a normal exit, so a step's background processes never outlive the step.
Output is read in chunks into a head + tail buffer, so a command printing gigabytes keeps the
worker's memory flat. Given a `Masker`, secrets are masked as the chunks arrive, before the
capping, so neither a chunk boundary nor the cap boundary can let part of a secret through.
"""

from __future__ import annotations

import codecs
import io
import os
import select
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ade_tasks.secrets import Masker, StreamMasker

OUTPUT_CAP = 80_000
STOP_CHECK_INTERVAL = 0.25
_CHUNK = 64 * 1024


class _ExitWatch:
    """Waits for a child to exit without reaping it, waking the moment it does.

    Uses a pidfd (Linux >= 5.3); `Popen.wait(timeout)` would instead poll with sleeps of up to
    tens of milliseconds, which dominates the latency of a short command.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._fd: int | None = None

    def __enter__(self) -> Callable[[float], bool]:
        try:
            self._fd = os.pidfd_open(self._proc.pid)
        except (AttributeError, OSError):  # no pidfd here: fall back to polling
            return self._poll
        return self._select

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)

    def _select(self, timeout: float) -> bool:
        assert self._fd is not None
        readable, _, _ = select.select([self._fd], [], [], max(timeout, 0))
        return bool(readable)

    def _poll(self, timeout: float) -> bool:
        end = time.monotonic() + max(timeout, 0)
        while self._proc.poll() is None:
            if time.monotonic() >= end:
                return False
            time.sleep(0.005)
        return True


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


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Does any process of the group still exist?"""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_group(pgid: int, grace: float) -> None:
    """TERM the whole group, wait up to `grace` seconds, then KILL whatever is left."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)


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
) -> ProcessResult:
    """Run `argv` to completion or until `timeout` / `should_stop()`; stdout and stderr merged."""
    started = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so the kill reaches every descendant
    )
    output = CappedOutput(cap)
    stream = StreamMasker(masker) if masker else None
    reader = threading.Thread(target=_drain, args=(proc, output, stream), daemon=True)
    reader.start()

    deadline = started + timeout
    timed_out = cancelled = False
    with _ExitWatch(proc) as exited:
        while not exited(min(deadline - time.monotonic(), STOP_CHECK_INTERVAL)):
            if time.monotonic() >= deadline:
                timed_out = True
                break
            if should_stop():
                cancelled = True
                break
    # Kill before reaping: the group id cannot be reused while the leader is unreaped.
    kill_group(proc.pid, kill_grace if (timed_out or cancelled) else 0.0)
    exit_code = proc.wait()
    reader.join(timeout=5)
    return ProcessResult(
        exit_code=None if (timed_out or cancelled) else exit_code,
        output=output.text(),
        timed_out=timed_out,
        cancelled=cancelled,
        duration=time.monotonic() - started,
    )


def _drain(
    proc: subprocess.Popen[bytes], output: CappedOutput, masking: StreamMasker | None
) -> None:
    stream = cast(io.BufferedReader, proc.stdout)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with stream:
        while chunk := stream.read1(_CHUNK):
            text = _printable(decoder.decode(chunk))
            output.write(masking.feed(text) if masking else text)
    rest = _printable(decoder.decode(b"", final=True))
    output.write((masking.feed(rest) + masking.flush()) if masking else rest)


def _printable(text: str) -> str:
    # PostgreSQL text cannot hold NUL; binary output is shown as replacement characters.
    return text.replace("\x00", "\ufffd")
