"""Process containment on a real `celery worker`: what a run starts dies with its worker."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from ade_tasks.db import runs as runs_db
from ade_tasks.db.schema import RunRow
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.conftest import write_rule
from tests.integration.conftest import Cluster
from tests.support import host_pid, pid_alive, wait_until


def read_pid(path: Path) -> int:
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else 0


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])


def run_row(cluster: Cluster, run_id: str) -> RunRow:
    with cluster.session_factory() as session:
        return runs_db.get_run(session, run_id)


def test_a_daemon_of_a_run_dies_when_its_worker_group_is_sigkilled(
    cluster: Cluster, project: Path
) -> None:
    command = (
        "setsid -f sh -c 'echo $$ > daemon.pid; exec sleep 300'; "
        "while [ ! -s daemon.pid ]; do sleep 0.01; done; echo $$ > command.pid; exec sleep 300"
    )
    write_rule(cluster.tmp / "rules", "daemon.yaml", f"""
        id: daemon
        triggers: [{{type: manual}}]
        execution:
          kind: built-in
          actions: [{{id: d, type: run-command, command: {command!r}}}]
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    worker = cluster.worker(queues="ade.builtin")
    run_id = dispatch(
        cluster.session_factory, cluster.sender(), "daemon", TriggerEvent.manual()
    ).run.id

    # What the command wrote are pids of its sandbox's namespace; these are the host's.
    command_pid = wait_until(
        lambda: host_pid(read_pid(project / "command.pid"), worker.pid), 30, "the command"
    )
    daemon_pid = host_pid(read_pid(project / "daemon.pid"), worker.pid)
    assert pid_alive(daemon_pid) and pid_alive(command_pid)
    assert run_row(cluster, run_id).status == "running"
    supervisor = parent_of(command_pid)
    assert os.getpgid(supervisor) != worker.pid  # outside the worker's process group

    worker.signal(signal.SIGKILL)  # the worker's whole process group: master and pool

    everything = [daemon_pid, command_pid, supervisor]
    wait_until(
        lambda: not any(pid_alive(pid) for pid in everything),
        5,
        f"the daemon, the command and their supervisor {everything} to die with the worker",
    )
