"""The Celery implementation of dispatch's TaskSender interface."""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery
from kombu.exceptions import BatchPublishError, OperationalError
from kombu.utils.url import maybe_sanitize_url

from ade_tasks.errors import BrokerUnavailableError

EXECUTE_TASK = "ade.runs.execute"
INGRESS_TASK = "ade.ingress.dispatch"
INGRESS_QUEUE = "ade.control"


class CelerySender:
    """Publishes run ids with Celery; the run's task shows the rule id as its name (shadow)."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def send_run(self, run_id: str, *, queue: str, rule_id: str) -> None:
        self.send_runs([(run_id, queue, rule_id)])

    def send_runs(self, runs: Sequence[tuple[str, str, str]]) -> None:
        """Publish (run id, queue, rule id) messages over one producer (one pool checkout for a
        whole batch of a beat's schedules), in one publish batch (kombu >= 5.7: on Redis one
        pipeline of LPUSHes instead of a round trip and a client checkout a message, about
        half a beat's CPU at a boundary; transports without batches publish one by one).

        A batch that fails mid-way may have delivered some of its messages: all of them stay
        queued runs that the recovery sweep sends again, and a second message of a run is
        harmless (a worker's claim is atomic)."""
        try:
            with self.app.producer_or_acquire() as producer, producer.batch():
                for run_id, queue, rule_id in runs:
                    self.app.send_task(
                        EXECUTE_TASK,
                        args=[run_id],
                        queue=queue,
                        shadow=rule_id,
                        retry=True,
                        producer=producer,
                    )
        except (TimeoutError, OperationalError, BatchPublishError, OSError) as exc:
            raise self._unavailable(exc, "the run stays queued") from exc

    def send_ingress(self, *event_ids: int) -> None:
        try:
            self.app.send_task(INGRESS_TASK, args=event_ids, queue=INGRESS_QUEUE, retry=True)
        except (TimeoutError, OperationalError, OSError) as exc:
            raise self._unavailable(exc, "the event stays stored") from exc

    def _unavailable(self, exc: Exception, kept: str) -> BrokerUnavailableError:
        broker = maybe_sanitize_url(self.app.conf.broker_url or "")
        return BrokerUnavailableError(
            f"the broker at {broker} is unreachable ({exc}); {kept} and is sent when the "
            "broker is back"
        )
