"""The runner's shutdown reaches every process a run started, daemons that left its session too."""

from __future__ import annotations

import threading
from pathlib import Path

from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine import run_monitor
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.support import processes_running, wait_until
from tests.unit.conftest import add_rule


def test_shutdown_kills_a_daemon_the_running_step_started(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    # A sandboxed pid means nothing outside: the daemon is found by its unique argument.
    command = "setsid -f sh -c 'echo $$ > daemon.pid; exec sleep 300.25'; exec sleep 300"
    add_rule(session_factory, rules_dir, "r", f"""
id: r
triggers: [{{type: manual}}]
execution: {{kind: built-in, actions: [{{id: s, type: run-command, command: {command!r}}}]}}
""")  # fmt: skip
    run_id = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual()).run.id
    daemon = project / "daemon.pid"

    def shut_down_once_the_daemon_runs() -> None:
        wait_until(lambda: daemon.exists() and daemon.read_text().strip(), 30, "the daemon")
        run_monitor.SHUTDOWN.set()  # what `ade-tasks dev` does on Ctrl-C

    host = threading.Thread(target=shut_down_once_the_daemon_runs)
    host.start()
    try:
        execute_run(session_factory, config, run_id, "test-worker")
    finally:
        host.join()
        run_monitor.SHUTDOWN.clear()

    with session_factory() as session:
        assert runs_db.get_run(session, run_id).status == RunStatus.CANCELLED
    assert daemon.read_text().strip()
    wait_until(lambda: not processes_running("300.25"), 10, "the daemon to be gone")


def test_a_step_that_kills_its_supervisor_is_not_reported_as_never_started(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    # The command ran (it wrote started.txt), started a daemon, then killed its parent: its
    # supervisor. The sandbox ends with it: no process of the step is left.
    command = "echo $$ > started.txt; setsid -f sleep 300.5; kill -9 $PPID; sleep 5.5"
    add_rule(session_factory, rules_dir, "r", f"""
id: r
triggers: [{{type: manual}}]
execution: {{kind: built-in, actions: [{{id: s, type: run-command, command: {command!r}}}]}}
""")  # fmt: skip
    run_id = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual()).run.id

    status = execute_run(session_factory, config, run_id, "test-worker")

    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
    assert status == RunStatus.FAILED
    assert (project / "started.txt").exists()
    assert "could not start" not in (run.error or "")
    assert "the command started, then its supervisor was killed" in (run.error or "")
    assert "nothing it started is left" in (run.error or "")
    for token in ("300.5", "5.5"):
        wait_until(lambda t=token: not processes_running(t), 10, f"`sleep {token}` to end")
