"""The fault suite's service faults: the broker stopped for ten seconds, and the database's
connections terminated six times, both under load.

Part of the fault suite: `tests.integration.fault_suite` says what is counted (lost, duplicated,
stuck, wrongly failed: all 0).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.integration.conftest import Cluster, terminate_backends
from tests.integration.fault_suite import CONCURRENCY, Load, steady_rule, tally
from tests.support import Child, free_port, wait_until

# --- broker outage ------------------------------------------------------------------------------


class OwnRedis:
    """A redis-server of the test's own on a free loopback port, to stop and start at will."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.tmp = tmp
        self.child: Child | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.tmp)]  # fmt: skip
        self.child = Child(argv, dict(os.environ), self.tmp / f"redis-{self.port}.log")
        wait_until(lambda: "Ready to accept" in self.child.output(), 15, "redis to start")

    def stop(self) -> None:
        assert self.child is not None
        self.child.signal(signal.SIGKILL)  # an outage, not a clean shutdown
        self.child.proc.wait(10)
        self.child.stop()


#: The broker outage: several leases (3 s) and recovery sweeps (1 s) long.
OUTAGE = 10


def test_broker_stopped_for_ten_seconds_under_load(cluster: Cluster, tmp_path: Path) -> None:
    broker = OwnRedis(tmp_path)
    broker.start()
    cluster.settings = cluster.settings.model_copy(update={"broker_url": broker.url})
    cluster.env["ADE_BROKER_URL"] = broker.url
    ledger = steady_rule(cluster)
    cluster.worker(queues="ade.control")
    cluster.worker(queues="ade.builtin", concurrency=CONCURRENCY)
    api = cluster.api()
    load = Load(api, 50, pause=0.1).start()
    try:
        wait_until(lambda: load.done() >= 10, 60, "10 runs accepted before the outage")
        broker.stop()
        outage_ends = time.monotonic() + OUTAGE
        accepted_before = load.done()
        wait_until(
            lambda: time.monotonic() >= outage_ends, OUTAGE + 5, f"the {OUTAGE} s outage",
            interval=0.5,
        )  # fmt: skip
        assert load.done() > accepted_before, "the API stopped accepting runs without a broker"
    finally:
        broker.start()
    try:
        load.join(120)
        tally(cluster, f"broker stopped for {OUTAGE} s", load, ledger, timeout=120)
    finally:
        for child in cluster.children:  # the workers and API first: they hold the broker's URL
            child.stop()
        broker.stop()


# --- database connections terminated ------------------------------------------------------------


def test_six_rounds_of_terminated_database_connections_under_load(cluster: Cluster) -> None:
    ledger = steady_rule(cluster)
    cluster.worker(queues="ade.control")
    cluster.worker(queues="ade.builtin", concurrency=CONCURRENCY)
    api = cluster.api()
    load = Load(api, 100).start()
    for round_ in range(6):
        wait_until(lambda r=round_: load.done() >= 10 + 12 * r, 60, f"load before round {round_}")
        terminate_backends(cluster)
    load.join(120)
    tally(cluster, "six pg_terminate_backend rounds", load, ledger, timeout=90)
