"""The fault suite's worker SIGKILL: the whole worker group killed twice while every pool process
is inside a command, on Redis and on RabbitMQ.

Part of the fault suite: `tests.integration.fault_suite` says what is counted (lost, duplicated,
stuck, wrongly failed: all 0).
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.integration.conftest import Cluster
from tests.integration.fault_suite import (
    CONCURRENCY,
    Load,
    completions,
    descendants,
    steady_rule,
    tally,
)
from tests.support import Child, wait_until

#: The SIGKILL scenario's command, and how much of it at least is left when the kill lands.
KILLED_SLEEP = 1.0
KILL_MARGIN = 0.3


def _all_commands_mid_sleep(worker: Child) -> bool:
    """Is every pool process of the worker inside a command's sleep, with at least
    `KILL_MARGIN` of it left?

    A kill then lands where the promise is exact (the command dies with its worker, and its
    step runs again), never in the few milliseconds between a command's end and its record,
    where no engine can know whether the command ran. The margin is the time the command's
    supervisor has to see its worker gone and kill it: a stall of the whole machine longer than
    that lets the command finish. With a 150 ms margin CI once saw 3 runs' commands complete
    twice (cause not proven; the ledger's times now tell a late kill from a lapsed lease).
    """
    found = descendants(worker.pid)
    sleeps = [age for _, name, age in found if name == "sleep"]
    if len(sleeps) == CONCURRENCY and max(sleeps) < KILLED_SLEEP - KILL_MARGIN:
        return True
    raise AssertionError(f"not yet: {sorted((n, round(a, 2)) for _, n, a in found)}")


def _sigkill_twice(cluster: Cluster, scenario: str) -> None:
    ledger = steady_rule(cluster, sleep=KILLED_SLEEP)
    cluster.worker(queues="ade.control")
    victim = cluster.worker(queues="ade.builtin", concurrency=CONCURRENCY)
    api = cluster.api()
    # Every run is queued before the first kill, so every pool process is always busy.
    load = Load(api, 48, pause=0).start()
    load.join(120)
    kills: dict[float, str] = {}
    for finished_before_kill in (8, 24):
        wait_until(
            lambda n=finished_before_kill: len(completions(ledger)) >= n,
            90,
            f"{finished_before_kill} runs to complete",
        )
        wait_until(lambda v=victim: _all_commands_mid_sleep(v), 30, "every command mid-sleep", 0.01)
        victim.signal(signal.SIGKILL)
        kills[round(time.time(), 3)] = f"SIGKILL of worker group {victim.pid}"
        victim.proc.wait(10)
        victim = cluster.worker(queues="ade.builtin", concurrency=CONCURRENCY)
    tally(cluster, scenario, load, ledger, timeout=90, faults=kills)


def test_worker_group_sigkilled_twice_on_redis(cluster: Cluster) -> None:
    _sigkill_twice(cluster, "worker group SIGKILLed twice (Redis)")


@pytest.mark.rabbitmq
def test_worker_group_sigkilled_twice_on_rabbitmq(cluster: Cluster, rabbitmq_url: str) -> None:
    cluster.settings = cluster.settings.model_copy(update={"broker_url": rabbitmq_url})
    cluster.env["ADE_BROKER_URL"] = rabbitmq_url
    _sigkill_twice(cluster, "worker group SIGKILLed twice (RabbitMQ)")
