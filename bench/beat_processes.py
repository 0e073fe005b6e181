"""The processes of `bench/beat.py`: starting and stopping them, their CPU, the minute clock."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.common import BenchError, machine_idle_seconds, tail

REPO_ROOT = Path(__file__).resolve().parent.parent
START_LEAD_SECONDS = 25.0  # processes start at least this long before their boundary
READY_MARGIN_SECONDS = 1.0  # and must be ready this long before it
STOP_SECONDS = 15.0


@dataclass
class Child:
    """A benchmark subprocess in its own session (its pgid is its pid), logging to a file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(
                f"{self.name} exited with status {self.proc.returncode}; its log ends with:\n"
                + tail(self.log)
            )


def start_child(
    name: str, argv: Sequence[str], env: dict[str, str], cwd: Path, logs: Path
) -> Child:
    log_path = logs / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Child(name, proc, log_path)


def stop_children(children: Sequence[Child]) -> None:
    """SIGTERM all, then SIGKILL each one's own process group after a shared deadline."""
    for child in children:
        if child.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        if child.proc.poll() is None:
            print(f"{child.name} ignored SIGTERM for {STOP_SECONDS:g}s; killing it")
        # Started in its own session, so its pgid is its pid: this reaches only what it forked.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=5)


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process, from /proc; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime stime


@dataclass
class CpuSample:
    """CPU seconds of some processes, by group name and pid, at one moment (Linux /proc)."""

    wall: float
    idle: float
    ours: float
    groups: dict[str, dict[int, float]]

    @classmethod
    def take(cls, groups: Mapping[str, Sequence[int]]) -> CpuSample:
        taken = {
            name: {pid: cpu for pid in pids if (cpu := cpu_seconds(pid)) is not None}
            for name, pids in groups.items()
        }
        return cls(time.monotonic(), machine_idle_seconds(), time.process_time(), taken)

    def since(self, before: CpuSample) -> dict[str, float]:
        """CPU seconds per group between two samples (a process new in this one counts fully),
        then this process (the poller), everything else on the machine, idle, and capacity."""
        spent = {
            name: sum(cpu - before.groups.get(name, {}).get(pid, 0.0) for pid, cpu in pids.items())
            for name, pids in self.groups.items()
        }
        spent["bench poller"] = self.ours - before.ours
        spent["idle"] = self.idle - before.idle
        capacity = (os.cpu_count() or 1) * (self.wall - before.wall)
        spent["other processes"] = capacity - sum(spent.values())
        spent["capacity"] = capacity
        return spent


def cpu_note(spent: dict[str, float], count: int, unit: str) -> str:
    per = 1000 / count
    parts = [f"{name} {spent[name] * per:.2f} ms" for name in spent if name != "capacity"]
    return f"CPU per {unit}: " + ", ".join(parts) + f", of {spent['capacity'] * per:.2f} core-ms"


def sleep_until(moment: float) -> None:
    """Sleep until the epoch time `moment` (bounded: at most one hour)."""
    for _ in range(7200):
        remaining = moment - time.time()
        if remaining <= 0:
            return
        time.sleep(min(remaining, 0.5))


def plan_boundary(lead: float = START_LEAD_SECONDS) -> float:
    """The minute boundary to measure from, as epoch seconds; processes may start right after.

    Processes started now fire at the next boundary, so when that is less than `lead` away (too
    close for them to start and load), wait until it has passed and use the following one.
    """
    now = time.time()
    boundary = math.floor(now / 60) * 60 + 60
    if boundary - now < lead:
        print(f"  waiting {boundary - now + 0.5:.0f} s for a minute boundary ...", flush=True)
        sleep_until(boundary + 0.5)
        boundary += 60
    return boundary


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%S")


def base_env() -> dict[str, str]:
    """Our environment without any ADE_* or BENCH_* variable, with the repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADE_", "BENCH_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env
