"""The run messages `CelerySender` publishes on Redis: the message Celery's own `send_task`
would publish, by either of the sender's two paths."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, signals
from celery._state import _task_stack

from ade_tasks.settings import Settings
from ade_workers.celery.app import BUILTIN_QUEUE, create_celery_app
from ade_workers.celery.sender import EXECUTE_TASK, CelerySender

#: What differs between two messages of the same run by design: their task ids.
PER_MESSAGE = {"id", "root_id", "correlation_id", "delivery_tag"}
#: Celery's send_task copies the options it was given into the message's properties too,
#: where no consumer reads them; the headers carry them.
SEND_TASK_OPTIONS = {"argsrepr", "kwargsrepr"}


@pytest.fixture
def app(redis_url: str) -> Iterator[Celery]:
    app = create_celery_app(Settings(broker_url=redis_url))
    yield app
    app.close()


def _pop(redis_url: str, queue: str) -> dict[str, Any]:
    client = redis.Redis.from_url(redis_url)
    try:
        raw = client.rpop(queue)  # LPUSHed: the oldest message is on the right
    finally:
        client.close()
    assert raw is not None, f"no message in {queue}"
    message: dict[str, Any] = json.loads(raw)
    return message


def _comparable(message: dict[str, Any]) -> dict[str, Any]:
    headers = {k: v for k, v in message["headers"].items() if k not in PER_MESSAGE}
    ignored = PER_MESSAGE | SEND_TASK_OPTIONS
    properties = {k: v for k, v in message["properties"].items() if k not in ignored}
    return {**message, "headers": headers, "properties": properties}


def test_a_run_message_is_the_one_celery_send_task_publishes(app: Celery, redis_url: str) -> None:
    CelerySender(app).send_run("run-1", queue=BUILTIN_QUEUE, rule_id="nightly")
    ours = _pop(redis_url, BUILTIN_QUEUE)
    app.send_task(
        EXECUTE_TASK, args=["run-1"], queue=BUILTIN_QUEUE, shadow="nightly",
        argsrepr="['run-1']", kwargsrepr="{}",
    )  # fmt: skip
    celerys = _pop(redis_url, BUILTIN_QUEUE)

    assert _comparable(ours) == _comparable(celerys)
    assert ours["headers"]["task"] == EXECUTE_TASK and ours["headers"]["shadow"] == "nightly"
    assert ours["headers"]["root_id"] == ours["headers"]["id"] != celerys["headers"]["id"]
    body = json.loads(base64.b64decode(ours["body"]))
    assert body[0] == ["run-1"] and body[1] == {}


def test_a_run_sent_from_inside_a_task_names_it_as_its_parent(app: Celery, redis_url: str) -> None:
    # A run dispatched by a task (an ingress event's) shows in Flower as that task's child.
    parent = app.tasks["ade.ingress.dispatch"]
    parent.push_request(id="ingress-task-1", root_id="root-task-0", called_directly=False)
    _task_stack.push(parent)
    try:
        CelerySender(app).send_run("run-2", queue=BUILTIN_QUEUE, rule_id="on-push")
        app.send_task(EXECUTE_TASK, args=["run-2"], queue=BUILTIN_QUEUE, shadow="on-push")
    finally:
        _task_stack.pop()
        parent.pop_request()
    ours, celerys = _pop(redis_url, BUILTIN_QUEUE), _pop(redis_url, BUILTIN_QUEUE)

    for message in (ours, celerys):
        assert message["headers"]["parent_id"] == "ingress-task-1"
        assert message["headers"]["root_id"] == "root-task-0"


def test_a_batch_to_two_queues_delivers_every_message_in_order(app: Celery, redis_url: str) -> None:
    runs = [(f"run-{n}", queue, "rule") for n, queue in enumerate(["ade.q1", "ade.q2", "ade.q1"])]
    CelerySender(app).send_runs(runs)

    first, third = _pop(redis_url, "ade.q1"), _pop(redis_url, "ade.q1")
    second = _pop(redis_url, "ade.q2")
    assert [m["headers"]["argsrepr"] for m in (first, second, third)] == [
        "['run-0']", "['run-1']", "['run-2']",
    ]  # fmt: skip


def test_a_publish_listener_hears_of_every_run(app: Celery, redis_url: str) -> None:
    # Tracing instrumentation hooks Celery's publish signals; only Celery's send_task sends
    # them, so with a listener connected the sender publishes through it.
    heard: list[tuple[str, str]] = []

    def listener(sender: str, headers: dict[str, Any], **_: Any) -> None:
        heard.append((sender, headers["argsrepr"]))

    signals.before_task_publish.connect(listener)
    try:
        CelerySender(app).send_runs([("run-3", BUILTIN_QUEUE, "r"), ("run-4", BUILTIN_QUEUE, "r")])
    finally:
        signals.before_task_publish.disconnect(listener)
    assert heard == [(EXECUTE_TASK, "['run-3']"), (EXECUTE_TASK, "['run-4']")]
    assert _pop(redis_url, BUILTIN_QUEUE)["headers"]["argsrepr"] == "['run-3']"

    CelerySender(app).send_run("run-5", queue=BUILTIN_QUEUE, rule_id="r")  # nobody listens now
    assert len(heard) == 2
