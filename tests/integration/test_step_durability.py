"""Finished steps are durable before the next one starts; a lost worker's run resumes after them.

Real PostgreSQL, Redis, `celery worker` and `ade-tasks beat` processes and the HTTP API.
"""

from __future__ import annotations

import signal
from pathlib import Path

from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_recovery as run_recovery_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.integration.conftest import Cluster
from tests.integration.test_run_path import add_rule, finished
from tests.support import wait_until


def steps_of(cluster: Cluster, run_id: str) -> list[tuple[str, str, str]]:
    with cluster.session_factory() as session:
        return [(s.step_id, s.status, s.output) for s in run_steps_db.list_steps(session, run_id)]


def test_a_running_run_shows_its_finished_steps_and_cancelling_keeps_them(
    cluster: Cluster,
) -> None:
    add_rule(
        cluster,
        "two",
        '            - {id: first, type: run-command, command: "echo one"}\n'
        '            - {id: second, type: run-command, command: "exec sleep 60"}',
    )
    cluster.worker(queues="ade.builtin")
    api = cluster.api()
    run_id = api.post("/api/v1/rules/two/runs").json()["run_id"]

    # While step 2 runs, step 1 is in the history with its output.
    running = wait_until(
        lambda: (
            (d := api.get(f"/api/v1/runs/{run_id}").json())["status"] == "running"
            and [s["status"] for s in d["steps"]] == ["succeeded", "running"]
            and d
        ),
        20,
        "step 1 recorded while step 2 runs",
    )
    assert running["steps"][0]["output"] == "one\n"

    cancelled = api.post(f"/api/v1/runs/{run_id}/cancel", json={"note": "enough"})
    assert cancelled.status_code == 200, cancelled.text
    assert finished(cluster, run_id).status == "cancelled"
    # Step 1 stays, with its output, after the worker noticed the cancel.
    wait_until(
        lambda: steps_of(cluster, run_id)[1][1] == "failed", 20, "step 2 to be ended by the cancel"
    )
    assert steps_of(cluster, run_id)[0] == ("first", "succeeded", "one\n")


def _kill_during_second_step(cluster: Cluster, project: Path, rule: str) -> tuple[str, object]:
    victim = cluster.worker(queues="ade.builtin")
    cluster.worker(queues="ade.control")
    cluster.beat()
    run_id = dispatch(cluster.session_factory, cluster.sender(), rule, TriggerEvent.manual()).run.id
    wait_until(
        lambda: [s[1] for s in steps_of(cluster, run_id)] == ["succeeded", "running"],
        20,
        "step 2 to run",
    )
    victim.signal(signal.SIGKILL)
    return run_id, cluster.worker(queues="ade.builtin")


def test_a_lost_worker_keeps_the_finished_step_and_fails_the_interrupted_one(
    cluster: Cluster, project: Path
) -> None:
    add_rule(
        cluster,
        "lost",
        '            - {id: first, type: run-command, command: "echo one"}\n'
        '            - {id: second, type: run-command, command: "exec sleep 60"}\n'
        '            - {id: third, type: run-command, command: "echo never"}\n'
        '            - {id: cleanup, type: run-command, command: "echo tidy", always_run: true}',
    )
    run_id, _ = _kill_during_second_step(cluster, project, "lost")

    row = finished(cluster, run_id, timeout=40)

    assert row.status == "failed"
    assert row.error is not None and "step 'second' (#2) failed: worker lost" in row.error
    steps = steps_of(cluster, run_id)
    assert steps[0] == ("first", "succeeded", "one\n")
    assert steps[1][:2] == ("second", "failed")
    assert [s[:2] for s in steps[2:]] == [("third", "skipped"), ("cleanup", "succeeded")]
    with cluster.session_factory() as session:
        kinds = [kind for kind, _ in run_events_db.events_of(session, run_id, "run.")]
        assert kinds.count(run_recovery_db.RESUMED_EVENT) == 1
        assert run_recovery_db.INTERRUPTED_EVENT in kinds


def test_a_lost_worker_s_step_with_retry_runs_again_on_the_next_worker(
    cluster: Cluster, project: Path
) -> None:
    # The first attempt of step 2 leaves a marker and hangs; the second finds it and succeeds.
    add_rule(
        cluster,
        "again",
        '            - {id: first, type: run-command, command: "echo one"}\n'
        "            - {id: second, type: run-command, retry: 1,\n"
        '               command: "if [ -f tried ]; then echo second try; else touch tried; exec sleep 60; fi"}',
    )
    run_id, _ = _kill_during_second_step(cluster, project, "again")

    row = finished(cluster, run_id, timeout=40)

    assert row.status == "succeeded", row.error
    assert steps_of(cluster, run_id) == [
        ("first", "succeeded", "one\n"),
        ("second", "succeeded", "second try\n"),
    ]


def test_without_a_beat_the_workers_resume_a_run_whose_worker_died(
    cluster: Cluster, project: Path
) -> None:
    # A webhook-only cluster: workers and no beat. The survivors' housekeeping recovers the run.
    add_rule(
        cluster,
        "nobeat",
        '            - {id: first, type: run-command, command: "echo one"}\n'
        '            - {id: second, type: run-command, command: "exec sleep 60"}',
    )
    victim = cluster.worker(queues="ade.builtin")
    cluster.worker(queues="ade.control")
    run_id = dispatch(
        cluster.session_factory, cluster.sender(), "nobeat", TriggerEvent.manual()
    ).run.id
    wait_until(
        lambda: [s[1] for s in steps_of(cluster, run_id)] == ["succeeded", "running"],
        20,
        "step 2 to run",
    )
    victim.signal(signal.SIGKILL)
    cluster.worker(queues="ade.builtin")

    # Lease 3 s + sweep every 1 s in this cluster: well within the deadline.
    row = finished(cluster, run_id, timeout=30)

    assert row.status == "failed" and "worker lost while this step ran" in (row.error or "")
    assert steps_of(cluster, run_id)[0] == ("first", "succeeded", "one\n")
