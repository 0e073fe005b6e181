"""The escape corpus every sandboxed agent process and command step is attacked with, and what
must come of it.

One shell script tries, in order: the worker's environment through /proc (and every process's
it can see, for the worker's canary variable), the engine's token file, source and virtualenv,
a program through the dynamic loader (reading /etc/shadow), a signal to the worker, TCP to
PostgreSQL, Redis, RabbitMQ and a listening server of the test's, a symlink to the token file,
and filling the sandbox's /tmp. `check_escapes` asserts, from what the script
printed, that every attempt was refused or came to nothing.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import ade_workers

#: The services of this machine, and what a sandboxed process must not reach.
SERVICE_PORTS = (5432, 6379, 5672)
#: A variable of the worker's (this process's) environment, holding the target's token: no
#: process a sandboxed command can see may carry it.
WORKER_CANARY = "ADE_TEST_WORKER_CANARY"


@dataclass(frozen=True)
class Target:
    """What the corpus attacks: the worker's pid, a token file of the engine's (holding
    `token`), a file of the engine's source, and TCP ports that listen on the host."""

    worker_pid: int
    token_file: Path
    token: str
    engine_file: Path
    ports: tuple[int, ...]
    venv: Path = Path(sys.prefix)

    @classmethod
    def of_this_process(cls, token_file: Path, extra_ports: tuple[int, ...] = ()) -> Target:
        os.environ[WORKER_CANARY] = token_file.read_text().strip()
        return cls(
            worker_pid=os.getpid(),
            token_file=token_file,
            token=token_file.read_text().strip(),
            engine_file=Path(ade_workers.__file__).resolve(),
            ports=(*SERVICE_PORTS, *extra_ports),
        )


def escape_script(target: Target) -> str:
    ports = " ".join(str(port) for port in target.ports)
    return "; ".join(
        [
            f"echo ENV; cat /proc/{target.worker_pid}/environ | tr '\\0' '\\n' | head -3",
            "echo ENVALL; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -a CANARY",
            f"echo TOKEN; cat {target.token_file} | rev",
            f"echo SOURCE; echo pwned >> {target.engine_file} && echo WROTE-SOURCE",
            f"echo VENV; touch {target.venv}/bin/pwned && echo WROTE-VENV",
            "echo LOADER; /lib64/ld-linux-x86-64.so.2 /usr/bin/cat /etc/shadow | base64",
            f"echo SIGNAL; kill -0 {target.worker_pid} && echo SIGNALLED",
            f"for p in {ports}; do (echo > /dev/tcp/127.0.0.1/$p) 2>/dev/null && echo OPEN-$p; done",
            f"echo LINK; ln -sf {target.token_file} escape-link; cat escape-link | rev",
            "echo FILL; head -c 1200M /dev/zero > /tmp/fill; echo fill-exit-$?; rm -f /tmp/fill",
            "echo END",
        ]
    )


def check_escapes(output: str, target: Target) -> None:
    """Assert that the corpus's output shows no attempt succeeded."""
    assert "END" in output, output  # the script ran to its end
    assert "PATH=" not in output and "HOME=" not in output, output
    assert target.token not in output and target.token[::-1] not in output, output
    assert "WROTE-SOURCE" not in output and "pwned" not in target.engine_file.read_text()
    assert "WROTE-VENV" not in output and not (target.venv / "bin" / "pwned").exists()
    assert "cm9vd" not in output, output  # base64 of "root:" from /etc/shadow
    assert "SIGNALLED" not in output, output
    assert "OPEN-" not in output, output
    assert "fill-exit-0" not in output, output
