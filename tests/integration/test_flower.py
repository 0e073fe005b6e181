"""Flower on real parts: a `celery flower` process with basic auth, a `celery worker` and Redis.

The deployment runs Flower with authentication on, workers with task events on, and each run's
task named by its rule (shadow) with only the run id as its argument, so Flower shows which rule
ran without ever showing a secret.
"""

from __future__ import annotations

import secrets
from typing import Any

import httpx

from ade_tasks.db import runs as runs_db
from ade_tasks.dispatch import TriggerEvent, dispatch
from tests.integration.conftest import Cluster
from tests.integration.test_run_path import add_rule, finished
from tests.support import BIN, Child, free_port, wait_until

SECRET_NAME = "ADE_IT_FLOWER_TOKEN"
RULE_ID = "flower-visible"


def start_flower(cluster: Cluster, user: str, password: str) -> tuple[Child, str]:
    """A real `celery flower` with basic auth, on the cluster's broker; returns it and its URL."""
    port = free_port()
    argv = [
        str(BIN / "celery"),
        "-A",
        "ade_workers.celery_app",
        "--broker",
        cluster.settings.broker_url,
        "flower",
        f"--port={port}",
        "--address=127.0.0.1",
        f"--basic-auth={user}:{password}",
    ]
    # The cluster's environment, without any FLOWER_* setting (FLOWER_UNAUTHENTICATED_API...)
    # that would change what is tested.
    env = {k: v for k, v in cluster.env.items() if not k.startswith("FLOWER_")}
    child = Child(argv, env, cluster.tmp / f"flower-{port}.log", cluster.tmp)
    cluster.children.append(child)  # stopped by the fixture should the test fail early
    return child, f"http://127.0.0.1:{port}"


def worker_name(worker: Child) -> str:
    argv = list(worker.proc.args)  # type: ignore[arg-type]
    return str(argv[argv.index("-n") + 1])


def test_flower_requires_auth_and_shows_the_run_by_rule_without_secrets(cluster: Cluster) -> None:
    secret = f"s3cr3t-{secrets.token_hex(12)}"
    add_rule(
        cluster,
        RULE_ID,
        f'            - {{id: use, type: run-command, command: "test -n ${{env:{SECRET_NAME}}} '
        f'&& echo token=${{env:{SECRET_NAME}}}"}}',
    )
    worker = cluster.worker(env={SECRET_NAME: secret})
    name = worker_name(worker)
    password = secrets.token_urlsafe(18)
    flower, url = start_flower(cluster, "ops", password)

    with (
        httpx.Client(base_url=url, timeout=5) as anonymous,
        httpx.Client(base_url=url, timeout=5, auth=("ops", password)) as ops,
        httpx.Client(base_url=url, timeout=5, auth=("ops", password + "x")) as wrong,
    ):
        # Flower's event receiver has seen the worker (heartbeats): from here on it sees the
        # worker's task events, so a run dispatched now cannot be missed.
        def seen_by_events() -> bool:
            response = ops.get("/workers", params={"json": 1})
            response.raise_for_status()
            return name in {w["hostname"] for w in response.json()["data"]}

        wait_until(seen_by_events, 30, f"Flower to see worker {name} (log: {flower.log})")

        for path in ("/api/tasks", "/api/workers", "/workers", "/"):
            assert anonymous.get(path).status_code == 401, path
            assert wrong.get(path).status_code == 401, path

        result = dispatch(cluster.session_factory, cluster.sender(), RULE_ID, TriggerEvent.manual())
        run_id = result.run.id
        assert finished(cluster, run_id).status == "succeeded"
        with cluster.session_factory() as session:
            (step,) = runs_db.list_steps(session, run_id)
        assert step.output == "token=***\n"  # the worker resolved the secret (and masked it)

        def run_task() -> tuple[str, dict[str, Any]] | None:
            response = ops.get("/api/tasks")
            response.raise_for_status()
            for uuid, task in response.json().items():
                if run_id in str(task.get("args")) and task.get("state") == "SUCCESS":
                    return response.text, {"uuid": uuid, **task}
            return None

        found = wait_until(run_task, 30, f"Flower to list run {run_id}'s task")
        assert found is not None
        body, task = found
        assert task["name"] == RULE_ID  # the shadow name: the rule, not ade.runs.execute
        assert task["args"] == repr([run_id])  # the run id and nothing else
        assert task["kwargs"] == "{}"
        assert task["worker"] == name
        assert secret not in body

        info = ops.get(f"/api/task/info/{task['uuid']}")
        assert info.status_code == 200, info.text
        assert info.json()["name"] == RULE_ID
        assert secret not in info.text
        assert anonymous.get(f"/api/task/info/{task['uuid']}").status_code == 401

        workers = ops.get("/api/workers", params={"refresh": 1})
        assert workers.status_code == 200, workers.text
        assert name in workers.json()
        assert secret not in workers.text
        assert name in ops.get("/workers").text  # the dashboard page

    assert secret not in flower.output()
    flower.stop()
