"""The package's test helpers: in-memory stand-ins for the interfaces ade_workers implements,
for the tests of this package and of the packages above it (as `procrastinate.testing`)."""

from __future__ import annotations

from collections.abc import Sequence

from ade_tasks.errors import BrokerUnavailableError


class InMemorySender:
    """A `TaskSender` (`ade_tasks.runs.senders`) that records what it sent; `down = True` plays
    a broker that cannot be reached."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.ingress: list[int] = []
        self.down = False

    def send_run(self, run_id: str, *, queue: str, rule_id: str) -> None:
        self.send_runs([(run_id, queue, rule_id)])

    def send_runs(self, runs: Sequence[tuple[str, str, str]]) -> None:
        if self.down:
            raise BrokerUnavailableError("the in-memory broker is marked down")
        self.sent.extend(runs)

    def send_ingress(self, *event_ids: int) -> None:
        if self.down:
            raise BrokerUnavailableError("the in-memory broker is marked down")
        self.ingress.extend(event_ids)
