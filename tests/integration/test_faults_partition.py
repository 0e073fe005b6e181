"""The fault suite's network partition: a worker in a network namespace of its own cut off from
the broker and the database for twenty seconds while a healthy worker goes on.

Part of the fault suite: `tests.integration.fault_suite` says what is counted (lost, duplicated,
stuck, wrongly failed: all 0).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import make_url

from tests.integration.conftest import Cluster
from tests.integration.fault_suite import LEDGER_LINE, RULE, Load, descendants, run_events, tally
from tests.integration.test_run_path import add_rule
from tests.support import Child, wait_until


class Forwarder:
    """TCP forwarding from an address of the test's veth link to a loopback service, so a
    worker in a network namespace reaches PostgreSQL and Redis only across that link."""

    def __init__(self, listen_host: str, target_port: int) -> None:
        import socket

        self.target_port = target_port
        self._server = socket.create_server((listen_host, 0))
        self.port = int(self._server.getsockname()[1])
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: object, sink: object) -> None:
        import socket

        assert isinstance(source, socket.socket) and isinstance(sink, socket.socket)
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed.set()
        self._server.close()


class WorkerHost:
    """A network namespace joined to this host by one veth pair (addresses only on that
    link): the worker inside reaches the database and broker through it, and cutting the
    link partitions it from both."""

    def __init__(self, tag: str) -> None:
        self.name = f"adef{tag}"
        self.link = f"vh{tag}"
        self.host_address = "10.231.0.1"
        self.inside_address = "10.231.0.2"

    def _ip(self, *args: str, inside: bool = False) -> None:
        prefix = ["ip", "netns", "exec", self.name] if inside else []
        subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, timeout=20)

    def create(self) -> None:
        subprocess.run(["ip", "netns", "add", self.name], check=True, timeout=20)
        self._ip("link", "add", self.link, "type", "veth", "peer", "name", f"vn{self.link[2:]}")
        self._ip("link", "set", f"vn{self.link[2:]}", "netns", self.name)
        self._ip("addr", "add", f"{self.host_address}/30", "dev", self.link)
        self._ip("link", "set", self.link, "up")
        self._ip("addr", "add", f"{self.inside_address}/30", "dev", f"vn{self.link[2:]}",
                 inside=True)  # fmt: skip
        self._ip("link", "set", f"vn{self.link[2:]}", "up", inside=True)
        self._ip("link", "set", "lo", "up", inside=True)

    def cut(self) -> None:
        self._ip("link", "set", self.link, "down")

    def heal(self) -> None:
        self._ip("link", "set", self.link, "up")

    def destroy(self) -> None:
        subprocess.run(["ip", "link", "del", self.link], capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=20)


#: The partition scenario's runs: long enough that the cut lands in the middle of a command.
PARTITION_SLEEP = 3.0
#: The partition: many leases (3 s) and recovery sweeps (1 s) long, and long enough for the
#: healthy side to run every run while it lasts.
PARTITION = 20


def test_a_worker_partitioned_from_broker_and_database_for_twenty_seconds(
    cluster: Cluster, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root") if not os.environ.get("CI") else pytest.fail(
            "the partition scenario needs root for `ip netns` (CI runs as root)"
        )
    add_rule(
        cluster,
        RULE,
        f'            - {{id: work, type: run-command, retry: 2, command: "sleep {PARTITION_SLEEP}; '
        f'{LEDGER_LINE}"}}',
    )
    ledger = cluster.settings.project_root("default") / "ledger"
    host = WorkerHost(uuid.uuid4().hex[:6])
    host.create()
    forwarders: list[Forwarder] = []
    partitioned: Child | None = None
    try:
        database, broker = (
            make_url(cluster.settings.database_url),
            make_url(cluster.env["ADE_BROKER_URL"]),
        )
        pg = Forwarder(host.host_address, database.port or 5432)
        rd = Forwarder(host.host_address, broker.port or 6379)
        forwarders += [pg, rd]
        # Inside, statements give up after 0.7 s of silence from the network (libpq's
        # tcp_user_timeout), so the worker notices it cannot renew its leases.
        inside_db = database.set(host=host.host_address, port=pg.port).update_query_dict(
            {"tcp_user_timeout": "700"}
        )
        inside_env = {
            "ADE_DATABASE_URL": inside_db.render_as_string(hide_password=False),
            "ADE_BROKER_URL": broker.set(host=host.host_address, port=rd.port).render_as_string(
                hide_password=False
            ),
        }
        partitioned = cluster.worker(
            queues="ade.builtin", concurrency=2, env=inside_env,
            prefix=["ip", "netns", "exec", host.name],
        )  # fmt: skip
        api = cluster.api()
        load = Load(api, 10, pause=0).start()
        load.join(60)
        # Both of its processes mid-command: the cut stops them mid-sleep.
        wait_until(
            lambda: len([a for _, n, a in descendants(partitioned.pid) if n == "sleep"]) == 2,
            30,
            "the partitioned worker to run two commands",
        )
        host.cut()
        cluster.worker(queues="ade.builtin,ade.control", concurrency=2)  # the healthy side
        cut_ends = time.monotonic() + PARTITION
        wait_until(
            lambda: time.monotonic() >= cut_ends, PARTITION + 5, f"the {PARTITION} s partition",
            interval=1,
        )  # fmt: skip
        host.heal()
        tally(
            cluster, f"worker partitioned from broker and database for {PARTITION} s", load,
            ledger, 90,
        )  # fmt: skip
        # The two runs it held were stopped there and resumed on the healthy side.
        resumed = [r for r in load.accepted.values() if "run.resumed_after_worker_lost" in
                   [kind for _, kind, _ in run_events(cluster, r)]]  # fmt: skip
        assert len(resumed) >= 2, resumed
    finally:
        if partitioned is not None:  # the fault's victim: no clean shutdown to wait 15 s for
            partitioned.signal(signal.SIGKILL)
        host.destroy()
        for forwarder in forwarders:
            forwarder.close()
