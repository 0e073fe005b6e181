"""Flower on real parts: a `celery flower` process with basic auth, a `celery worker` and Redis.

The deployment runs Flower with authentication on, read from `FLOWER_BASIC_AUTH` in its
environment (never its command line), bound to loopback (Flower serves `/metrics` without a
login), workers with task events on, and each run's task named by its rule (shadow) with only the
run id as its argument, so Flower shows which rule ran without ever showing a secret.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
from pathlib import Path
from typing import Any

import httpx

from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.integration.conftest import Cluster
from tests.integration.test_run_path import add_rule, finished, run_row
from tests.support import BIN, Child, free_port, wait_until
from tests.unit.deploy.deploy_files import DEPLOY, systemd_argv, systemd_unit

SECRET_NAME = "ADE_IT_FLOWER_TOKEN"
RULE_ID = "flower-visible"


def deployed_flower_argv(port: int) -> list[str]:
    """Flower's command line as deploy/systemd/ade-flower.service has it, on `port`."""
    service = dict(systemd_unit(DEPLOY / "systemd" / "ade-flower.service")["Service"])
    argv = systemd_argv(service["ExecStart"])
    argv[0] = str(BIN / "celery")
    return [f"--port={port}" if arg.startswith("--port=") else arg for arg in argv]


def start_flower(cluster: Cluster, user: str, password: str) -> tuple[Child, str]:
    """A real `celery flower` started as the deploy files start it, its login in its
    environment, on the cluster's broker; returns it and its URL (once it answers)."""
    port = free_port()
    argv = deployed_flower_argv(port)
    # The cluster's environment, without any FLOWER_* setting (FLOWER_UNAUTHENTICATED_API...)
    # that would change what is tested, plus the login.
    env = {k: v for k, v in cluster.env.items() if not k.startswith("FLOWER_")}
    env["FLOWER_BASIC_AUTH"] = f"{user}:{password}"
    child = Child(argv, env, cluster.tmp / f"flower-{port}.log", cluster.tmp)
    cluster.children.append(child)  # stopped by the fixture should the test fail early
    url = f"http://127.0.0.1:{port}"
    wait_until(
        lambda: httpx.get(f"{url}/healthcheck", timeout=2).status_code == 200,
        30,
        f"Flower to answer (log: {child.log})",
    )
    return child, url


def command_lines(pid: int) -> list[str]:
    """The command line of a process and of all its descendants, as `ps` shows them."""
    lines = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()]
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            lines += command_lines(int(child))
    return lines


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """The TCP addresses a process listens on (its sockets in /proc/<pid>/net/tcp, tcp6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                host, port = local.split(":")
                found.add((_address(host), int(port, 16)))
    return found


def worker_name(worker: Child) -> str:
    argv = list(worker.proc.args)  # type: ignore[arg-type]
    return str(argv[argv.index("-n") + 1])


def wait_for_worker(ops: httpx.Client, name: str, flower: Child) -> None:
    """Until Flower's event receiver has seen the worker (heartbeats): from then on it sees the
    worker's task events, so a run dispatched now cannot be missed."""

    def seen_by_events() -> bool:
        response = ops.get("/workers", params={"json": 1})
        response.raise_for_status()
        return name in {w["hostname"] for w in response.json()["data"]}

    wait_until(seen_by_events, 30, f"Flower to see worker {name} (log: {flower.log})")


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
        wait_for_worker(ops, name, flower)

        for path in ("/api/tasks", "/api/workers", "/workers", "/"):
            assert anonymous.get(path).status_code == 401, path
            assert wrong.get(path).status_code == 401, path

        result = dispatch(cluster.session_factory, cluster.sender(), RULE_ID, TriggerEvent.manual())
        run_id = result.run.id
        assert finished(cluster, run_id).status == "succeeded"
        with cluster.session_factory() as session:
            (step,) = run_steps_db.list_steps(session, run_id)
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


def test_flower_takes_its_login_from_the_environment_never_its_command_line(
    cluster: Cluster,
) -> None:
    # Given Flower started as the deploy files start it, FLOWER_BASIC_AUTH in its environment
    password = secrets.token_urlsafe(18)
    flower, url = start_flower(cluster, "ops", password)
    # Then the login works and is required
    with httpx.Client(base_url=url, timeout=5) as client:
        assert client.get("/api/workers", auth=("ops", password)).status_code == 200
        assert client.get("/api/workers", auth=("ops", password + "x")).status_code == 401
        assert client.get("/api/workers").status_code == 401
        assert client.get("/workers").status_code == 401
    # And no command line `ps` shows holds it
    lines = command_lines(flower.pid)
    assert lines and "flower" in lines[0], lines
    assert not [line for line in lines if password in line or "basic-auth" in line], lines


def test_flower_serves_metrics_without_a_login_so_it_listens_on_loopback_only(
    cluster: Cluster,
) -> None:
    # Given Flower started as the deploy files start it, with a login
    password = secrets.token_urlsafe(18)
    flower, url = start_flower(cluster, "ops", password)
    port = int(url.rsplit(":", 1)[1])
    # Flower itself answers /metrics without the login (no @authenticated on it): this is why
    # the deploy files keep it on loopback. Should Flower start asking, this may become a 401.
    metrics = httpx.get(f"{url}/metrics", timeout=5)
    assert metrics.status_code in (200, 401)
    # Then Flower listens on loopback and nowhere else: /metrics is unreachable off the host
    listening = listening_addresses(flower.pid)
    assert ("127.0.0.1", port) in listening, listening
    assert all(ipaddress.ip_address(host).is_loopback for host, _ in listening), listening


def test_flowers_failed_filter_finds_a_failed_run_and_a_successful_run_is_success(
    cluster: Cluster,
) -> None:
    # Given a rule whose step fails, one whose step succeeds, a worker and Flower watching it
    add_rule(
        cluster, "flower-fails", '            - {id: boom, type: run-command, command: "exit 3"}'
    )
    add_rule(
        cluster, "flower-passes", '            - {id: fine, type: run-command, command: "true"}'
    )
    worker = cluster.worker()
    name = worker_name(worker)
    password = secrets.token_urlsafe(18)
    flower, url = start_flower(cluster, "ops", password)
    with httpx.Client(base_url=url, timeout=5, auth=("ops", password)) as ops:
        wait_for_worker(ops, name, flower)

        # When a run of each finishes
        sender = cluster.sender()
        failed = dispatch(cluster.session_factory, sender, "flower-fails", TriggerEvent.manual())
        passed = dispatch(cluster.session_factory, sender, "flower-passes", TriggerEvent.manual())
        assert finished(cluster, failed.run.id).status == "failed"
        assert finished(cluster, passed.run.id).status == "succeeded"

        # Then Flower's Failed filter (the tasks API's state=FAILURE) finds the failed run's task,
        # with why, and its Succeeded filter the other one
        def tasks_in(state: str, run_id: str) -> list[dict[str, Any]]:
            response = ops.get("/api/tasks", params={"state": state})
            response.raise_for_status()
            return [t for t in response.json().values() if run_id in str(t.get("args"))]

        (failed_task,) = wait_until(
            lambda: tasks_in("FAILURE", failed.run.id), 30, "Flower to list the failed run's task"
        )
        assert failed_task["name"] == "flower-fails"
        assert f"run {failed.run.id} ended failed" in failed_task["exception"]
        wait_until(lambda: tasks_in("SUCCESS", passed.run.id), 30, "the successful run's task")
        assert tasks_in("FAILURE", passed.run.id) == []
        assert tasks_in("SUCCESS", failed.run.id) == []

    # And the failed run's task was acked, not redelivered: the run ran once, on one attempt
    with cluster.session_factory() as session:
        (step,) = run_steps_db.list_steps(session, failed.run.id)
    assert step.exit_code == 3
    assert run_row(cluster, failed.run.id).attempt == 1
    flower.stop()
