"""Smoke test: the same run path with RabbitMQ as the broker."""

from __future__ import annotations

import pytest

from ade_tasks.runs.dispatch import TriggerEvent, dispatch
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
