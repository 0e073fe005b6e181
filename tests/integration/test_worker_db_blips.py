"""A worker whose database connections are terminated (`pg_terminate_backend`) mid-run still
records every step and the run's outcome: bookkeeping is retried on fresh connections."""

from __future__ import annotations

from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.integration.conftest import Cluster, terminate_backends
from tests.integration.test_run_path import add_rule, finished
from tests.support import wait_until


def test_terminated_connections_during_every_step_lose_nothing(cluster: Cluster) -> None:
    # Each step waits for the test to kill the worker's connections, then ends.
    steps = "\n".join(
        f'            - {{id: s{i}, type: run-command, command: "while [ ! -f go{i} ]; do sleep 0.05; done; echo {i}"}}'
        for i in range(3)
    )
    add_rule(cluster, "blips", steps)
    cluster.worker(queues="ade.builtin", concurrency=1)
    run_id = dispatch(
        cluster.session_factory, cluster.sender(), "blips", TriggerEvent.manual()
    ).run.id
    project = cluster.settings.project_root("default")

    def step_running(index: int) -> bool:
        with cluster.session_factory() as session:
            steps = run_steps_db.list_steps(session, run_id)
            return any(s.index == index and s.status == "running" for s in steps)

    for i in range(3):
        wait_until(lambda i=i: step_running(i), 20, f"step {i} to run")
        terminate_backends(cluster)
        (project / f"go{i}").touch()

    row = finished(cluster, run_id)
    assert (row.status, row.error) == ("succeeded", None)
    with cluster.session_factory() as session:
        recorded = [
            (s.step_id, s.status, s.output) for s in run_steps_db.list_steps(session, run_id)
        ]
    assert recorded == [(f"s{i}", "succeeded", f"{i}\n") for i in range(3)]
