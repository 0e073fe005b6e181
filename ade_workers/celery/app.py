"""The Celery app factory, with the reliable configuration in one visible place.

`celery -A ade_workers.celery.app worker` works: the module's `app` attribute is built on first
access from the environment's settings, never at import time.
"""

from __future__ import annotations

import logging

from celery import Celery
from kombu.entity import Queue

from ade_tasks.db.engine import SessionFactory
from ade_tasks.settings import Settings, get_settings
from ade_workers.celery import ingress_queue
from ade_workers.celery.ingress_queue import CONTROL_QUEUE, INGRESS_QUEUE, INGRESS_TASK
from ade_workers.celery.redis_transport import transport_for
from ade_workers.celery.sender import EXECUTE_TASK, CelerySender

__all__ = [
    "CONTROL_QUEUE",
    "EXECUTE_TASK",
    "INGRESS_QUEUE",
    "CelerySender",
    "broker_reachable",
    "create_celery_app",
]

log = logging.getLogger(__name__)
app: Celery  # built on first access by __getattr__ below

BUILTIN_QUEUE = "ade.builtin"
AGENT_QUEUE = "ade.agent"
#: ade.control: the recovery sweep; ade.ingress: matching webhooks and events
#: (`ingress_queue`), each away from the pools that run rules.
DEFAULT_QUEUES = (BUILTIN_QUEUE, AGENT_QUEUE, CONTROL_QUEUE, INGRESS_QUEUE)
RECOVER_TASK = "ade.control.recover"

# A rule may run up to 12 h (max_duration_min 720); an unacked message must not be redelivered
# while its run is still going, so Redis' visibility timeout sits above that.
LONGEST_RUN_SECONDS = 12 * 3600
VISIBILITY_TIMEOUT = LONGEST_RUN_SECONDS + 3600
# Embedded mode: kombu's in-memory transport polls every second by default, which makes a
# worker with prefetch 1 crawl (about 4 tasks/s); 5 ms keeps it responsive.
MEMORY_POLLING_INTERVAL = 0.005


def _queue(name: str, broker_url: str) -> Queue:
    arguments: dict[str, int] = {}
    if broker_url.startswith(("amqp", "pyamqp")):
        # RabbitMQ closes channels whose delivery stays unacked past consumer_timeout (30 min);
        # runs may last 12 h. Honoured by RabbitMQ >= 3.12, ignored by older servers.
        arguments["x-consumer-timeout"] = VISIBILITY_TIMEOUT * 1000
    return Queue(name, routing_key=name, queue_arguments=arguments or None)  # type: ignore[no-untyped-call]


def create_celery_app(
    settings: Settings,
    *,
    extra_queues: tuple[str, ...] = (),
    session_factory: SessionFactory | None = None,
) -> Celery:
    """A Celery app configured for at-least-once delivery of run ids."""
    app = Celery("ade", broker=settings.broker_url, set_as_current=False)
    transport_options: dict[str, float] = {"visibility_timeout": VISIBILITY_TIMEOUT}
    if settings.broker_url.startswith("memory"):
        transport_options["polling_interval"] = MEMORY_POLLING_INTERVAL
    queues = tuple(dict.fromkeys((*DEFAULT_QUEUES, *extra_queues)))
    app.conf.update(
        # json only: pickle would let anyone who can publish run code on the workers.
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,  # the database holds outcomes
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # A broker reconnect must not kill running runs: their database lease, not the
        # broker's delivery, says who runs them, and a second delivery of the same run id finds
        # it claimed and does nothing. (Celery's default would terminate them and the run
        # would be recorded as lost although its command was fine.)
        worker_cancel_long_running_tasks_on_connection_loss=False,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=3,
        broker_transport_options=transport_options,
        # kombu's Redis transport with one client per channel, not one per command
        # (`redis_transport`) for redis://; every other broker keeps kombu's own.
        broker_transport=transport_for(settings.broker_url),
        task_publish_retry_policy={
            "max_retries": 2,
            "interval_start": 0,
            "interval_step": 0.5,
            "interval_max": 1,
        },
        # A `task-sent` event doubles the broker writes of every dispatch (measured: a beat
        # firing 10,000 schedules spends half its send time on them); workers' own events
        # already show each run's task in Flower, and queued runs are in ADE's run history.
        task_send_sent_event=settings.task_sent_events,
        worker_send_task_events=True,
        task_default_queue=BUILTIN_QUEUE,
        task_queues=[_queue(name, settings.broker_url) for name in queues],
        task_routes={
            RECOVER_TASK: {"queue": CONTROL_QUEUE},
            INGRESS_TASK: {"queue": INGRESS_QUEUE},
        },
        # Beat fires schedules and housekeeping from database claims, not from a static table.
        beat_scheduler="ade_workers.celery.beat:DatabaseScheduler",
        worker_hijack_root_logger=False,
        timezone="UTC",
        enable_utc=True,
    )
    from ade_workers.celery import housekeeper, metrics
    from ade_workers.celery.tasks import register_tasks

    register_tasks(app, settings, session_factory)
    # Signal handlers: log context and JSON lines for every task, worker metrics when configured.
    metrics.install(app, settings)
    housekeeper.install(app, settings)
    ingress_queue.install(app)
    return app


def broker_reachable(app: Celery, timeout: float = 2.0) -> str | None:
    """None when the broker answers, else the reason it does not."""
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=timeout)
    except Exception as exc:  # any failure means "not ready"; the reason goes to the caller
        return f"{type(exc).__name__}: {exc}"
    return None


def __getattr__(name: str) -> Celery:
    # `celery -A ade_workers.celery.app` looks up `app`; build it on first access only.
    if name == "app":
        global app
        app = create_celery_app(get_settings())
        return app
    raise AttributeError(name)
