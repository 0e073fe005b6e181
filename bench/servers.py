"""Child processes serving HTTP on loopback ports for the benchmarks: started in a session of
their own with `--port P`, logging to a file, waited for on GET /healthz and stopped with
everything they forked."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.common import BenchError, tail

REPO_ROOT = Path(__file__).resolve().parent.parent
START_SECONDS = 30.0
STOP_SECONDS = 10.0


@dataclass
class Server:
    """A child process serving HTTP on a loopback port, in its own session, logging to a file."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(
                f"{self.name} exited with status {self.proc.returncode}; its log ends with:\n"
                + tail(self.log)
            )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env() -> dict[str, str]:
    """Our environment without any ADE_* or BENCH_* variable, with the repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADE_", "BENCH_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _wait_up(server: Server) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        server.check_alive()
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{server.url}/healthz", timeout=1.0, trust_env=False).status_code == 200:
                return
        time.sleep(0.1)
    raise BenchError(
        f"{server.name} did not answer GET /healthz within {START_SECONDS:g} s:\n"
        + tail(server.log)
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_SECONDS)
    # Started in its own session, so its pgid is its pid: this reaches only what it forked.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@contextlib.contextmanager
def serving(name: str, argv: Sequence[str], env: dict[str, str], work: Path) -> Iterator[Server]:
    """A server started with `argv` + `--port P`, answering GET /healthz; stopped afterwards."""
    port = free_port()
    log_path = work / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*argv, "--port", str(port)],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(name, proc, f"http://127.0.0.1:{port}", log_path)
    try:
        _wait_up(server)
        yield server
        server.check_alive()
    finally:
        _stop(proc)
