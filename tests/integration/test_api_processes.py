"""`ade-tasks api --workers N` as real processes: every process takes its share of the
connections, a process that dies is replaced, a taken port is refused with what to do, and
SIGTERM stops them all."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Cluster
from tests.support import BIN, Child, child_pids, free_port, pid_alive, wait_until

CONNECTIONS = 16


def api_processes(parent: int) -> list[int]:
    """The uvicorn processes the supervisor started (not multiprocessing's resource tracker)."""
    found = []
    for pid in child_pids(parent):
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except FileNotFoundError:  # it just exited
            continue
    return found


def established_on(port: int, pid: int) -> int:
    """How many established TCP connections to `port` process `pid` holds (its fds' sockets
    matched against /proc/net/tcp)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def healthy(connection: http.client.HTTPConnection) -> bool:
    connection.request("GET", "/healthz")
    response = connection.getresponse()
    response.read()
    return response.status == 200


def answers(port: int) -> bool:
    """A new connection gets /healthz answered."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        return healthy(connection)
    finally:
        connection.close()


@pytest.fixture
def served(cluster: Cluster) -> Iterator[tuple[Child, int]]:
    port = free_port()
    argv = [str(BIN / "ade-tasks"), "api", "--workers", "2", "--port", str(port), "--no-sync-rules"]
    child = Child(argv, cluster.env, cluster.tmp / "api-workers.log", cluster.tmp)
    try:
        wait_until(lambda: answers(port), 30, f"the API ({child.log})")
        wait_until(lambda: len(api_processes(child.pid)) == 2, 10, "two API processes")
        # Both started, not only spawned: a process still importing when SIGTERM comes dies
        # of it at once, with no shutdown to log (on a loaded machine the second is slower).
        wait_until(
            lambda: child.output().count("Application startup complete") == 2,
            60,
            f"both API processes' start-up ({child.log})",
        )
        yield child, port
    finally:
        child.stop()


def test_every_process_takes_a_share_of_keep_alive_connections(served: tuple[Child, int]) -> None:
    child, port = served
    connections = [
        http.client.HTTPConnection("127.0.0.1", port, timeout=5) for _ in range(CONNECTIONS)
    ]
    try:
        assert all(healthy(c) for c in connections)  # opened at once, kept alive
        shares = [established_on(port, pid) for pid in api_processes(child.pid)]
    finally:
        for connection in connections:
            connection.close()

    assert sum(shares) == CONNECTIONS
    assert all(share > 0 for share in shares), shares


def test_a_killed_process_is_replaced_and_the_api_keeps_answering(
    served: tuple[Child, int],
) -> None:
    child, port = served
    victim, survivor = api_processes(child.pid)
    cpu_before = cpu_seconds(child.pid)
    os.kill(victim, signal.SIGKILL)

    replaced = wait_until(
        lambda: [p for p in api_processes(child.pid) if p not in (victim, survivor)],
        20,
        "a new API process",
    )
    assert "exited with -9; starting another" in child.output()
    # It waited a second before restarting, asleep: not spinning on the dead one's sentinel.
    assert cpu_seconds(child.pid) - cpu_before < 0.5
    assert all(answers(port) for _ in range(CONNECTIONS))  # spread over both sockets again
    assert api_processes(child.pid) == sorted([survivor, *replaced])


def test_sigterm_stops_every_process_and_exits_cleanly(served: tuple[Child, int]) -> None:
    child, _ = served
    processes = api_processes(child.pid)
    os.kill(child.pid, signal.SIGTERM)  # the supervisor alone, as systemd or Kubernetes does

    assert child.proc.wait(30) == 0
    assert not any(pid_alive(pid) for pid in processes)
    assert child.output().count("Application shutdown complete") == 2


def test_the_processes_stop_when_the_supervisor_is_killed(served: tuple[Child, int]) -> None:
    child, port = served
    processes = api_processes(child.pid)
    os.kill(child.pid, signal.SIGKILL)  # no chance to stop them itself

    wait_until(lambda: not any(pid_alive(pid) for pid in processes), 30, "the orphans to exit")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


def test_a_port_in_use_is_refused_with_what_to_do(cluster: Cluster) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [str(BIN / "ade-tasks"), "api", "--workers", "2", "--port", str(port)]
        child = Child(argv, cluster.env, cluster.tmp / "api-taken.log", cluster.tmp)
        code = child.proc.wait(30)

    assert code != 0
    assert f"cannot listen on 127.0.0.1:{port} (Address already in use)" in child.output()
    assert "pick another port (--port, ADE_API_PORT)" in child.output()
    assert api_processes(child.pid) == []


@pytest.mark.parametrize(
    ("app", "env", "logged"),
    [
        ("ade_api.no_such_module:app", {}, 'Could not import module "ade_api.no_such_module"'),
        # The factory raises (the settings refuse a pool of 0): not restarted once a second.
        ("ade_api.http.app:app_from_environment", {"ADE_DB_POOL_SIZE": "0"}, "db_pool_size"),
    ],
)
def test_an_app_that_cannot_start_stops_every_process(
    tmp_path: Path, app: str, env: dict[str, str], logged: str
) -> None:
    serve = (
        "from ade_api.cli.serve import serve; "
        f"serve({app!r}, workers=2, host='127.0.0.1', port={free_port()})"
    )
    argv = [sys.executable, "-c", serve]
    child = Child(argv, {**os.environ, **env}, tmp_path / "broken.log", tmp_path)

    assert child.proc.wait(60) != 0
    assert logged in child.output()
    assert "an API process failed to start; its log above says why" in child.output()
    assert child.output().count("Started server process") == 0
    assert api_processes(child.pid) == []
