"""Cancelling a running run on real parts (a real `celery worker` with the default heartbeat, a
real `ade-tasks api`, PostgreSQL, Redis): the step's command is gone within a second or two, not
at the worker's next heartbeat, and the worker says nothing alarming about a run stopped on
purpose."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.integration.conftest import Cluster
from tests.integration.test_run_path import add_rule, run_row
from tests.integration.test_runs_api import LONG, start
from tests.support import Child, host_pid, host_pids, pid_alive, wait_until

#: The production timing: a lease renewed every 15 s. Before cancellation had a signal of its own,
#: a cancelled command ran on until that renewal failed (about 11 s on average).
DEFAULT_TIMING = {"ADE_LEASE_SECONDS": "60", "ADE_HEARTBEAT_SECONDS": "15"}
#: Generous for a loaded 2-core machine; the heartbeat path takes up to 15 s.
CANCEL_DEADLINE = 3.0


def running_command(cluster: Cluster, project: Path, run_id: str, worker: Child) -> int:
    """The (host) pid of the run's command once its step shows as running."""
    pids = project / "pids"
    pid = wait_until(
        lambda: pids.exists() and host_pid(int(pids.read_text().split()[0]), worker.pid),
        20,
        "the step",
    )
    wait_until(lambda: run_row(cluster, run_id).status == "running", 10, "the run to run")
    return pid


def task_done(worker: Child) -> bool:
    """Has the worker finished the run's task (Celery logs it, under the rule's name)?"""
    return re.search(r"Task long\[[^\]]+\] succeeded in", worker.output()) is not None


def test_a_cancel_stops_the_running_command_within_a_second_or_two(
    cluster: Cluster, project: Path
) -> None:
    # Given a worker with the production heartbeat, running a long command
    add_rule(cluster, "long", LONG)
    api = cluster.api()
    worker = cluster.worker(env=DEFAULT_TIMING)
    run_id = start(cluster, "long")
    pid = running_command(cluster, project, run_id, worker)

    # When an operator cancels the run
    began = time.monotonic()
    cancelled = api.post(f"/api/v1/runs/{run_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text

    # Then the command is gone well before the next heartbeat could have noticed
    wait_until(lambda: not pid_alive(pid), CANCEL_DEADLINE, "the cancelled command to be killed")
    print(f"cancel -> command gone: {time.monotonic() - began:.2f}s")
    assert run_row(cluster, run_id).status == "cancelled"
    # And the worker finishes its task without warning about a lost lease
    wait_until(lambda: task_done(worker), 10, f"the worker to finish the task ({worker.log})")
    log = worker.output()
    assert "lost its lease" not in log and "no longer ours" not in log, log
    assert f"run {run_id} was cancelled" in log, log


def test_the_api_says_the_step_is_stopped_now(cluster: Cluster, project: Path) -> None:
    add_rule(cluster, "long", LONG)
    api = cluster.api()
    worker = cluster.worker(env=DEFAULT_TIMING)
    run_id = start(cluster, "long")
    running_command(cluster, project, run_id, worker)
    cancelled = api.post(f"/api/v1/runs/{run_id}/cancel")
    assert cancelled.json()["message"] == (
        "cancelled; its worker stops the running step within a second"
    )


def test_with_two_workers_a_cancel_stops_only_its_own_run(cluster: Cluster, project: Path) -> None:
    # Given two workers, each running one run of the same long rule
    add_rule(cluster, "long", LONG)
    api = cluster.api()
    workers = [cluster.worker(concurrency=1, env=DEFAULT_TIMING) for _ in range(2)]
    first, second = start(cluster, "long"), start(cluster, "long")
    pids = project / "pids"
    started = wait_until(
        lambda: pids.exists() and len(found := pids.read_text().split()) == 2 and found,
        20,
        "both commands to start",
    )
    both = wait_until(
        lambda: len(found := host_pids(map(int, started), [w.pid for w in workers])) == 2 and found,
        10,
        "both commands' host pids",
    )
    wait_until(
        lambda: all(run_row(cluster, r).status == "running" for r in (first, second)),
        10,
        "both runs to run",
    )
    hosts = {run_row(cluster, r).worker.split(":")[0] for r in (first, second)}
    assert len(hosts) == 2, hosts  # one run on each worker
    # When one run is cancelled
    assert api.post(f"/api/v1/runs/{first}/cancel").status_code == 200
    # Then exactly one command stops, at once, and the other run goes on
    wait_until(
        lambda: sum(pid_alive(p) for p in both) == 1, CANCEL_DEADLINE, "one command to stop"
    )
    assert run_row(cluster, first).status == "cancelled"
    assert run_row(cluster, second).status == "running"
    assert all("lost its lease" not in w.output() for w in workers)
    api.post(f"/api/v1/runs/{second}/cancel")
