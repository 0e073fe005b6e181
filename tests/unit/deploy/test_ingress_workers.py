"""Every deployment example matches webhooks and events in a worker of its own: some worker
consumes `ade.ingress`, and none that runs rules does (`ade_workers.celery.ingress_queue`)."""

from __future__ import annotations

import shlex

import pytest

from ade_workers.celery.app import CONTROL_QUEUE, DEFAULT_QUEUES, INGRESS_QUEUE
from ade_workers.celery.ingress_queue import adopted_queue
from tests.unit.deploy.command_lines import _worker_queues
from tests.unit.deploy.deploy_files import DEPLOY, all_commands

SOURCES = ("docker-compose.yml", "k8s/", "systemd/")


def consumed(queues: list[str]) -> set[str]:
    """What a worker started with `-Q queues` consumes, the queue it adopts included."""
    added = adopted_queue(queues)
    return {*queues, *([added] if added else [])}


def workers(source: str) -> dict[str, set[str]]:
    found = {}
    for command in all_commands():
        if command.source.startswith(source):
            queues = _worker_queues(command.argv)
            if queues is not None:
                found[command.source] = consumed(queues)
    return found


@pytest.mark.parametrize("source", SOURCES)
def test_each_example_has_an_ingress_worker_apart_from_the_run_workers(source: str) -> None:
    started = workers(source)
    ingress = [name for name, queues in started.items() if INGRESS_QUEUE in queues]
    assert ingress, f"no worker in {source} consumes {INGRESS_QUEUE}: {started}"
    for name, queues in started.items():
        runs = queues - {INGRESS_QUEUE, CONTROL_QUEUE}
        assert not (runs and INGRESS_QUEUE in queues), f"{name} runs rules and matches: {queues}"


def test_the_dockerfile_lists_the_ingress_worker_among_its_commands() -> None:
    lines = [
        line.lstrip("# ").split("  ")[0]
        for line in (DEPLOY / "Dockerfile").read_text().splitlines()
        if line.lstrip("# ").startswith("ade-tasks worker")
    ]
    queues = [_worker_queues(shlex.split(line)) for line in lines]
    assert [INGRESS_QUEUE, CONTROL_QUEUE] in queues, lines


def test_a_worker_on_control_adopts_ingress_and_no_other_does() -> None:
    assert adopted_queue(["ade.builtin", CONTROL_QUEUE]) == INGRESS_QUEUE  # an upgraded one
    assert adopted_queue([INGRESS_QUEUE, CONTROL_QUEUE]) is None
    assert adopted_queue(["ade.builtin"]) is None
    assert INGRESS_QUEUE in DEFAULT_QUEUES  # declared, so metrics list its depth
