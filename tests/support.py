"""Helpers shared by integration and e2e tests: polling with a deadline, child processes, ports."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
BIN = Path(sys.executable).parent
#: The Redis server the tests use (host:port). Several test runs at once (e.g. two checkouts on
#: one machine) each point this at a redis-server of their own, since every run flushes its DBs.
TEST_REDIS = os.environ.get("ADE_TEST_REDIS", "127.0.0.1:6379")


#: Lines of the fault suite's report (tests/integration/fault_suite.py), printed at the end of
#: the test session by `tests/conftest.py`.
FAULT_REPORTS: list[str] = []


#: The Redis DBs the tests may use (DB 0 is every deployment's default, 10-15 the benchmarks';
#: bench/common.py `REDIS_DB_OWNERS`). A test flushes the DB it uses, so one test process takes
#: `REDIS_DBS` of them and, under pytest-xdist, each worker (gw0, gw1) a range of its own.
TEST_REDIS_DBS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 13)
REDIS_DBS = 5
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_FIRST_DB = int(WORKER.removeprefix("gw") or 0) * REDIS_DBS


def redis_db_url(slot: int) -> str:
    """The URL of this test process's Redis DB number `slot` (0 to 4) on the tests' server."""
    if not 0 <= slot < REDIS_DBS:
        raise ValueError(f"Redis slot {slot} is not one of 0..{REDIS_DBS - 1}")
    if _FIRST_DB + slot >= len(TEST_REDIS_DBS):
        raise RuntimeError(f"pytest-xdist worker {WORKER} has no Redis DB left: run 2 at most")
    return f"redis://{TEST_REDIS}/{TEST_REDIS_DBS[_FIRST_DB + slot]}"


def wait_until(check: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # keep polling; report the last error if we give up
            last_error = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what} (last error: {last_error})"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The test process's environment without ADE_* variables and reading no env file (a
    developer's `.env`), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADE_")}
    env["ADE_ENV_FILE"] = ""
    env.update(extra)
    return env


class Child:
    """A child process in its own process group, with its output in a log file."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log: Path, cwd: Path | None = None):
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(
            argv,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> int:
        """KILL the group at once; returns the exit code. For a test's teardown, where nothing
        asks how a process ends: a celery worker's warm stop alone costs about 2 s (billiard's
        pool processes sleep 1 s before they exit). What a worker started in sessions of their
        own (the supervisors of its commands and agents) ends when its parent dies, as the
        fault suite's SIGKILL scenarios show."""
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait(10)
        self._log_file.close()
        return self.proc.returncode

    def stop(self, timeout: float = 15.0) -> int:
        """TERM the group, KILL it after `timeout`; returns the exit code."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(5)
        self._log_file.close()
        return self.proc.returncode


def vendor_pytest(target: Path) -> Path:
    """Copy pytest and what it imports into `target` (for `PYTHONPATH`): a project's own test
    tools, for a command step that runs pytest in the sandbox, which hides the engine's."""
    import _pytest
    import iniconfig
    import packaging
    import pluggy
    import pygments
    import pytest

    target.mkdir(parents=True, exist_ok=True)
    for module in (pytest, _pytest, pluggy, iniconfig, packaging, pygments):
        source = Path(module.__file__ or "").parent
        shutil.copytree(source, target / source.name, ignore=shutil.ignore_patterns("__pycache__"))
    site = Path(pytest.__file__ or "").parents[1]
    if (site / "py.py").is_file():
        shutil.copy(site / "py.py", target / "py.py")
    return target


def host_pids(ns_pids: Iterable[int], under: Iterable[int]) -> list[int]:
    """The host pids of the sandboxed processes that know themselves as one of `ns_pids` (what
    `echo $$` printed inside a sandbox's PID namespace) and descend from one of the host
    processes `under` (the workers that run them). Resolve them while they live."""
    wanted, roots = set(ns_pids), set(under)
    parents: dict[int, int] = {}
    candidates = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        parents[int(entry.name)] = int(fields["PPid"])
        nspid = fields.get("NSpid", "").split()
        if len(nspid) > 1 and int(nspid[-1]) in wanted:
            candidates.append(int(entry.name))
    found = []
    for pid in candidates:
        ancestor = parents.get(pid, 0)
        while ancestor > 1 and ancestor not in roots:
            ancestor = parents.get(ancestor, 0)
        if ancestor in roots:
            found.append(pid)
    return found


def host_pid(ns_pid: int, under: int) -> int:
    """The host pid of the one sandboxed process below `under` known inside as `ns_pid`."""
    found = host_pids([ns_pid], [under])
    if len(found) != 1:
        raise LookupError(f"{len(found)} processes below {under} are pid {ns_pid} in a sandbox")
    return found[0]


def processes_running(token: str) -> list[int]:
    """The host pids of live processes whose command line holds `token` (a sandboxed process
    knows only its pid inside its own namespace, so a test finds it by what it runs)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                    argv = cmdline.read().split(b"\0")
            except OSError:
                continue
            if token.encode() in argv and pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def pid_alive(pid: int) -> bool:
    """True for a live, non-zombie process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def rss_kib(pids: list[int]) -> int:
    """Summed resident memory of live processes."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            continue
    return total


def _live_processes() -> Iterator[tuple[int, list[str]]]:
    """(pid, the /proc/<pid>/stat fields after the command name) of every live process."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if fields[0] != "Z":
            yield int(entry.name), fields


def group_pids(pgid: int) -> list[int]:
    """Every live process in a process group."""
    return [pid for pid, fields in _live_processes() if int(fields[2]) == pgid]


def child_pids(ppid: int) -> list[int]:
    """The live children of a process."""
    return sorted(pid for pid, fields in _live_processes() if int(fields[1]) == ppid)
