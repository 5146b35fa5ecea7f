"""kombu's Redis transport, keeping one Redis client per channel for its commands.

kombu builds a new ``redis.Redis`` object for nearly every broker operation (each publish,
ack, task event and prefetch bookkeeping step). With redis-py 8 each construction copies a
table of several hundred response callbacks, which costs more than the Redis command itself.
The clients are interchangeable (they share the channel's connection pool and are
thread-safe), so this channel builds one and reuses it until the pool is replaced.
Selected with ``broker_transport`` in :mod:`workers.celery_app`; messages and queues are
exactly kombu's, so plain Celery clients and Flower interoperate unchanged.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    """kombu's Redis channel with its synchronous client built once per connection pool."""

    _adk_client: tuple[Any, Any] | None = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        pool = self.pool
        cached = self._adk_client
        if cached is None or cached[0] is not pool:  # new pool after a reconnect or fork
            cached = self._adk_client = (pool, super()._create_client())
        return cached[1]


class Transport(kombu_redis.Transport):
    """kombu's Redis transport using :class:`Channel`."""

    Channel = Channel
