"""How a stored run or ingress event reaches the workers: the sender interfaces that ade_workers
implements with Celery (`ade_workers.celery.sender.CelerySender`).

Code that sends runs asks for a `RunSender`, code that hands over ingress events an
`IngressSender`, and only what does both (the recovery sweep, the processes' wiring) a
`TaskSender`. This module imports nothing of the package, so sending a message never drags in
dispatch, the guardrails or the database; the in-memory sender the tests use is
`ade_tasks.testing.InMemorySender`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class RunSender(Protocol):
    """Sends a run's id to the workers of its queue."""

    def send_run(self, run_id: str, *, queue: str, rule_id: str) -> None:
        """Publish the run; raise `ade_tasks.errors.BrokerUnavailableError` when the broker
        cannot be reached (the run stays queued: the recovery sweep sends it)."""

    def send_runs(self, runs: Sequence[tuple[str, str, str]]) -> None:
        """Publish many (run id, queue, rule id) at once; BrokerUnavailableError as above."""


class IngressSender(Protocol):
    """Hands stored ingress events to the ingress workers."""

    def send_ingress(self, *event_ids: int) -> None:
        """Send the events' ids in one message; BrokerUnavailableError when the broker cannot
        be reached (the events stay stored: the recovery sweep sends them)."""


class TaskSender(RunSender, IngressSender, Protocol):
    """Sends both runs and ingress events, for what hands over both."""
