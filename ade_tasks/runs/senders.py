"""How a run's id reaches the workers: the `TaskSender` interface (ade_workers implements it with
Celery) and the in-memory one the tests use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ade_tasks.errors import BrokerUnavailableError


class TaskSender(Protocol):
    """Sends a run's id to the workers; ade_workers implements it with Celery."""

    def send_run(self, run_id: str, *, queue: str, rule_id: str) -> None:
        """Publish the run; raise BrokerUnavailableError when the broker cannot be reached."""

    def send_runs(self, runs: Sequence[tuple[str, str, str]]) -> None:
        """Publish many (run id, queue, rule id) at once; BrokerUnavailableError as above."""

    def send_ingress(self, *event_ids: int) -> None:
        """Hand stored ingress events to the ingress workers (one message for all of them);
        BrokerUnavailableError as above."""


class InMemorySender:
    """A TaskSender that records what it sent, for unit tests; `down = True` plays broker-down."""

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
