"""The Celery app carries the reliable configuration docs/operations.md (Cluster mode) describes."""

from __future__ import annotations

from ade_tasks.settings import Settings
from ade_workers.celery.app import LONGEST_RUN_SECONDS, create_celery_app


def test_reliable_delivery_settings() -> None:
    conf = create_celery_app(Settings(broker_url="redis://127.0.0.1:6379/0")).conf
    assert conf.accept_content == ["json"] and conf.task_serializer == "json"
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_ignore_result
    # A broker reconnect never kills a running run: the database lease says who runs it.
    assert conf.worker_cancel_long_running_tasks_on_connection_loss is False
    assert conf.broker_connection_retry_on_startup
    assert conf.broker_transport_options["visibility_timeout"] > LONGEST_RUN_SECONDS
    assert conf.worker_send_task_events and not conf.task_send_sent_event
    assert {q.name for q in conf.task_queues} == {
        "ade.builtin",
        "ade.agent",
        "ade.control",
        "ade.ingress",
    }
    assert conf.task_routes["ade.ingress.dispatch"] == {"queue": "ade.ingress"}


def test_tasks_have_explicit_stable_names() -> None:
    app = create_celery_app(Settings())
    assert {"ade.runs.execute", "ade.control.recover"} <= set(app.tasks)


def test_embedded_broker_polls_fast_and_rabbitmq_queues_outlive_long_runs() -> None:
    memory = create_celery_app(Settings()).conf
    assert memory.broker_transport_options["polling_interval"] <= 0.01
    amqp = create_celery_app(Settings(broker_url="amqp://guest:guest@127.0.0.1//")).conf
    timeouts = {q.queue_arguments["x-consumer-timeout"] for q in amqp.task_queues}
    assert min(timeouts) > LONGEST_RUN_SECONDS * 1000


def test_each_app_runs_its_own_tasks_with_its_own_settings() -> None:
    first = create_celery_app(Settings(lease_seconds=11))
    second = create_celery_app(Settings(lease_seconds=22))
    assert first.ade_runtime.settings.lease_seconds == 11
    assert second.ade_runtime.settings.lease_seconds == 22
    assert first.tasks["ade.runs.execute"] is not second.tasks["ade.runs.execute"]
