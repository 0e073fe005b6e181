"""ADE's Redis transport (`ade_workers.celery.redis_transport`) against the real Redis: one
client per channel, rebuilt with the channel's pool, and kombu's delivery semantics unchanged
(acks remove a message for good, an unacked one goes back to its queue)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from celery import Celery
from kombu import Connection
from kombu.transport import pyamqp
from kombu.transport import redis as kombu_redis

from ade_tasks.settings import Settings
from ade_workers.celery import redis_transport
from ade_workers.celery.app import create_celery_app

QUEUE = "ade.test.transport"


@pytest.fixture
def app(redis_url: str) -> Iterator[Celery]:
    app = create_celery_app(Settings(broker_url=redis_url))
    yield app
    app.close()


@pytest.fixture
def connection(app: Celery) -> Iterator[Connection]:
    with app.connection_for_write() as connection:
        yield connection


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("redis://127.0.0.1:6379/0", redis_transport.Transport),
        # kombu's own: only it applies its TLS defaults to a bare rediss:// URL.
        ("rediss://127.0.0.1:6379/0", kombu_redis.Transport),
        ("amqp://guest:guest@127.0.0.1:5672//", pyamqp.Transport),
    ],
)
def test_only_a_plain_redis_broker_gets_ades_transport(url: str, transport: type) -> None:
    app = create_celery_app(Settings(broker_url=url))
    try:
        with app.connection_for_write() as connection:
            assert type(connection.transport) is transport
    finally:
        app.close()


def test_a_channel_sends_every_command_through_one_client(
    connection: Connection, redis_url: str
) -> None:
    channel = connection.default_channel
    with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
        assert first is second
        assert first.connection_pool is channel.pool
    given = redis.Redis.from_url(redis_url)
    try:
        with channel.conn_or_acquire(given) as passed:  # a caller's own client is used as is
            assert passed is given
    finally:
        given.close()


def test_the_client_follows_the_channels_new_pool(connection: Connection) -> None:
    channel = connection.default_channel
    with channel.conn_or_acquire() as before:
        assert before.ping()
    channel._after_fork()  # what kombu does after a fork: the pool is dropped and made anew
    with channel.conn_or_acquire() as after:
        assert after is not before
        assert after.connection_pool is channel.pool is not before.connection_pool
        assert after.ping()


def test_acked_messages_are_gone_and_an_unacked_one_comes_back(app: Celery, redis_url: str) -> None:
    store = redis.Redis.from_url(redis_url)
    try:
        with app.connection_for_write() as connection:
            queue = connection.SimpleQueue(QUEUE)
            for number in range(3):
                queue.put({"n": number})
            received = [queue.get(timeout=5) for _ in range(3)]
            for message in received[:2]:
                message.ack()
            assert sorted(m.payload["n"] for m in received) == [0, 1, 2]
            # The third is delivered and unacked: kombu holds it in its unacked hash ...
            assert store.hlen("unacked") == 1
            queue.close()
        # ... and puts it back in its queue when its channel closes without an ack.
        assert store.hlen("unacked") == 0
        assert store.llen(QUEUE) == 1
        with app.connection_for_write() as connection:
            queue = connection.SimpleQueue(QUEUE)
            again = queue.get(timeout=5)
            assert again.payload == received[2].payload
            again.ack()
            queue.close()
        assert store.llen(QUEUE) == 0 and store.hlen("unacked") == 0
    finally:
        store.delete(QUEUE)
        store.close()
