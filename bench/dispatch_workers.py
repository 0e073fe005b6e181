"""The worker processes of `make bench` (bench/dispatch.py): a real prefork worker per side,
started in its own session, waited for by ping, stopped warm then killed by process group, and
the CPU its process group spends while a side's bursts run (/proc, Linux only)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from celery import Celery

from ade_tasks.settings import Settings
from ade_workers.containment.process import group_alive
from bench.common import BenchError, machine_idle_seconds, tail

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKER_START_SECONDS = 60.0
WORKER_STOP_SECONDS = 20.0


def _wait_ready(control: Celery, name: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + WORKER_START_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(
                f"worker {name} exited with status {proc.returncode}; its log ends with:\n"
                + tail(log_path)
            )
        if control.control.ping(destination=[name], timeout=1):
            return
    raise BenchError(
        f"worker {name} did not answer a ping within {WORKER_START_SECONDS:g}s; "
        f"its log ends with:\n{tail(log_path)}"
    )


def _group_cpu_seconds(pgid: int) -> float:
    """CPU time (user + system, including reaped children) of a process group, from /proc."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields[0] is stat's 3rd field (state); [2] is pgrp
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


@dataclass
class CpuMeter:
    """Where the CPU went during a side's bursts: this process, the side's worker (its process
    group), the rest (PostgreSQL, Redis, the other side's idle worker), idle; summed over the
    bursts `measuring` wraps.

    Linux only (/proc); the other sessions on the machine land in "other processes".
    """

    worker_pgid: int
    totals: list[float] = field(default_factory=lambda: [0.0] * 4)  # wall, ours, worker, idle

    def _now(self) -> tuple[float, ...]:
        return (
            time.monotonic(),
            time.process_time(),
            _group_cpu_seconds(self.worker_pgid),
            machine_idle_seconds(),
        )

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        before = self._now()
        yield
        for index, (start, end) in enumerate(zip(before, self._now(), strict=True)):
            self.totals[index] += end - start

    def note(self, count: int, unit: str) -> str:
        wall, ours, worker, idle = self.totals
        capacity = (os.cpu_count() or 1) * wall
        other = capacity - ours - worker - idle
        per = 1000 / count
        return (
            f"CPU per {unit} in the bursts: sender process {ours * per:.1f} ms, worker "
            f"{worker * per:.1f} ms, other processes (PostgreSQL, Redis, ...) {other * per:.1f} "
            f"ms, idle {idle * per:.1f} ms, of {capacity * per:.1f} core-ms"
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (warm shutdown), then SIGKILL the worker's own process group after a deadline."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=WORKER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            print(f"worker {proc.pid} ignored SIGTERM for {WORKER_STOP_SECONDS:g}s; killing it")
    # The worker was started in its own session, so its pgid is its pid: this reaches the pool
    # processes it forked and nothing else.
    if group_alive(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@contextlib.contextmanager
def running_worker(
    module: str, queue: str, env: dict[str, str], control: Celery, log_dir: Path, concurrency: int
) -> Iterator[int]:
    """A real prefork worker of the app `module` names, consuming `queue`, up and answering pings.

    Yields its pid, which is also the id of the process group holding its pool processes.
    """
    name = f"bench-{uuid.uuid4().hex[:12]}@localhost"
    log_path = log_dir / f"{name.partition('@')[0]}.log"
    argv = [
        sys.executable, "-m", "celery", "-A", module, "worker",
        "-Q", queue, "-P", "prefork", "-c", str(concurrency),
        "--without-mingle", "--without-gossip", "-n", name, "--loglevel=WARNING",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_ready(control, name, proc, log_path)
        yield proc.pid
        if proc.poll() is not None:
            raise BenchError(f"worker {name} died during the benchmark:\n{tail(log_path)}")
    finally:
        _stop(proc)


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment of a worker: ours without any ADE_* variable, plus the bench's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADE_")}
    env["ADE_DATABASE_URL"] = settings.database_url
    env["ADE_BROKER_URL"] = settings.broker_url
    env["ADE_PROJECTS__DEFAULT"] = str(settings.projects["default"])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env
