"""The Celery implementation of dispatch's TaskSender interface."""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery
from kombu.exceptions import OperationalError
from kombu.utils.url import maybe_sanitize_url

from ade_tasks.errors import BrokerUnavailableError

EXECUTE_TASK = "ade.runs.execute"


class CelerySender:
    """Publishes run ids with Celery; the run's task shows the rule id as its name (shadow)."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def send_run(self, run_id: str, *, queue: str, rule_id: str) -> None:
        self.send_runs([(run_id, queue, rule_id)])

    def send_runs(self, runs: Sequence[tuple[str, str, str]]) -> None:
        """Publish (run id, queue, rule id) messages over one producer (one pool checkout for a
        whole batch of a beat's schedules)."""
        try:
            with self.app.producer_or_acquire() as producer:
                for run_id, queue, rule_id in runs:
                    self.app.send_task(
                        EXECUTE_TASK,
                        args=[run_id],
                        queue=queue,
                        shadow=rule_id,
                        retry=True,
                        producer=producer,
                    )
        except (TimeoutError, OperationalError, OSError) as exc:
            broker = maybe_sanitize_url(self.app.conf.broker_url or "")
            raise BrokerUnavailableError(
                f"the broker at {broker} is unreachable ({exc}); "
                "the run stays queued and is sent when the broker is back"
            ) from exc
