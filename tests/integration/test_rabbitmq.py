"""Smoke test: the same run path with RabbitMQ as the broker."""

from __future__ import annotations

import time
import uuid

import pytest

from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings
from ade_workers.celery.app import CelerySender, create_celery_app
from tests.integration.conftest import Cluster
from tests.integration.test_run_path import add_rule, finished


@pytest.mark.rabbitmq
def test_a_manual_run_travels_through_rabbitmq(cluster: Cluster, rabbitmq_url: str) -> None:
    cluster.settings = cluster.settings.model_copy(update={"broker_url": rabbitmq_url})
    cluster.env["ADE_BROKER_URL"] = rabbitmq_url
    add_rule(
        cluster, "rabbit", '            - {id: a, type: run-command, command: "echo via amqp"}'
    )
    cluster.worker()
    sender = CelerySender(create_celery_app(cluster.settings))
    run_id = dispatch(cluster.session_factory, sender, "rabbit", TriggerEvent.manual()).run.id
    row = finished(cluster, run_id)
    assert row.status == "succeeded", row.error


@pytest.mark.rabbitmq
def test_a_batch_declares_each_of_its_queues_and_loses_no_message(rabbitmq_url: str) -> None:
    # RabbitMQ drops a message sent to a queue that does not exist: a batch that declared only
    # the queue of its first message would lose every message of its other queues.
    app = create_celery_app(Settings(broker_url=rabbitmq_url))
    queues = {f"ade.batch-{uuid.uuid4().hex[:8]}": 0 for _ in range(2)}
    first, second = queues
    order = [first, first, second, second, first]
    runs = [(f"run-{n}", queue, "rule") for n, queue in enumerate(order)]
    try:
        CelerySender(app).send_runs(runs)
        with app.connection_for_write() as connection:
            channel = connection.default_channel
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                counts = {q: channel.queue_declare(q, passive=True).message_count for q in queues}
                if counts == {first: 3, second: 2}:
                    break
                time.sleep(0.05)
            assert counts == {first: 3, second: 2}
            message = channel.basic_get(second, no_ack=True)
            assert message is not None and message.headers["argsrepr"] == "['run-2']"
            for queue in queues:
                channel.queue_delete(queue)
    finally:
        app.close()


@pytest.mark.rabbitmq
def test_single_runs_declare_their_queue_once_per_connection(rabbitmq_url: str) -> None:
    # A trigger's run goes alone; its queue is declared by the first send on a connection and
    # then taken from kombu's cache, so a second run to it and a run to a new queue both arrive.
    app = create_celery_app(Settings(broker_url=rabbitmq_url))
    first, second = (f"ade.single-{uuid.uuid4().hex[:8]}" for _ in range(2))
    sender = CelerySender(app)
    try:
        for n, queue in enumerate([first, first, second]):
            sender.send_run(f"run-{n}", queue=queue, rule_id="rule")
        with app.connection_for_write() as connection:
            channel = connection.default_channel
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                counts = {q: channel.queue_declare(q, passive=True).message_count
                          for q in (first, second)}  # fmt: skip
                if counts == {first: 2, second: 1}:
                    break
                time.sleep(0.05)
            assert counts == {first: 2, second: 1}
            for queue in (first, second):
                channel.queue_delete(queue)
    finally:
        app.close()
