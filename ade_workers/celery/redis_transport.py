"""kombu's Redis transport, with one Redis client per channel instead of one per command.

kombu's Redis channel builds a new `redis.Redis` around its connection pool for every publish,
every ack and every delivery it records as unacked (`Channel.conn_or_acquire`), and redis-py
(8.x) fills a fresh table of ~170 response callbacks in each client's constructor: 0.17 ms of
CPU, more than the LPUSH it is built for (0.12 ms with its round trip, measured 2026-12-06).
A client is only a handle on the pool (each command checks a connection out of the pool and
back), so one per channel serves every command the channel sends, from any thread, as the
fresh ones did; it is built again whenever the channel's pool is (after a fork or a lost
connection kombu replaces the pool, and the client must not keep the old one).

Celery uses this transport for `redis://` brokers (`transport_for`, which `create_celery_app`
passes as `broker_transport`); `rediss://` keeps kombu's own, which alone applies its TLS
defaults to a bare URL. Everything else of kombu's transport (visibility timeout, unacked
restore, batches, fanout, key prefixes) is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
from kombu.transport import redis as kombu_redis

#: The value of Celery's `broker_transport` setting that selects this transport.
TRANSPORT = "ade_workers.celery.redis_transport:Transport"


def transport_for(broker_url: str) -> str | None:
    """Celery's `broker_transport` for `broker_url`: this transport for a plain `redis://`
    broker, None (the URL's scheme decides, as in stock Celery) for every other."""
    return TRANSPORT if broker_url.startswith("redis://") else None


class Channel(kombu_redis.Channel):
    _shared_client: redis.Redis | None = None

    @contextmanager
    def conn_or_acquire(self, client: redis.Redis | None = None) -> Iterator[redis.Redis]:
        if client:
            yield client
            return
        shared = self._shared_client
        if shared is None or shared.connection_pool is not self.pool:
            shared = self._shared_client = self._create_client()  # type: ignore[no-untyped-call]
        yield shared


class Transport(kombu_redis.Transport):
    Channel = Channel
