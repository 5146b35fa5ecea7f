"""kombu's Redis transport: a channel that survives a lost connection and reuses its client.

The channel keeps the connection parameters it was opened with, so that closing it after the
broker connection was lost (a Redis restart) puts its unacknowledged messages back instead of
crashing the worker (see :meth:`Channel._connparams`).

Client reuse (a latency trick on kombu's private ``Channel._create_client``, switched off by
``ADK_CELERY_BROKER_CLIENT_REUSE=false``): kombu builds a new ``redis.Redis`` object for
nearly every broker operation (each publish, ack, task event and prefetch bookkeeping step).
With redis-py 8 each construction copies a table of several hundred response callbacks,
which costs more than the Redis command itself. The clients are interchangeable (they share
the channel's connection pool and are thread-safe), so this channel builds one and reuses it
until the pool is replaced. Its gain is measured by ``bench/library_tricks.py``.

Selected with ``broker_transport`` in :mod:`workers.celery_app`; messages and queues are
exactly kombu's, so plain Celery clients, workers and Flower interoperate unchanged.
"""

from __future__ import annotations

from typing import Any

import kombu
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

_KEEP_CONNPARAMS = (kombu.VERSION.major, kombu.VERSION.minor) <= (5, 7)
"""Whether :meth:`Channel._connparams` works around kombu's crash on a lost connection.

Seen with kombu 5.7.0, the newest release when this was written (the same crash was reported
against kombu 3.0 in celery/kombu#582). Check whether a later kombu still needs it (the
tests in tests/test_redis_restart.py fail without it) before widening the range.
"""


class Channel(kombu_redis.Channel):
    """kombu's Redis channel with its synchronous client built once per connection pool."""

    reuse_client = True
    """False: a new client for each operation, as kombu does (:class:`PlainClientTransport`)."""
    _adk_client: tuple[Any, Any] | None = None
    _adk_connparams: dict[bool, dict[str, Any]] | None = None

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        """The connection parameters kombu builds, kept so a detached channel still reaches Redis.

        When Celery's consumer loses the broker connection, it collects the kombu Connection
        (which detaches the transport from it: ``transport.client = None``) and then closes
        it, which closes the channels. kombu's channel close drops the channel's connection
        pools, then puts the channel's unacknowledged messages back in their queue, on a new
        pool built from ``self.connection.client``: ``AttributeError: 'NoneType' object has
        no attribute 'hostname'``. That is not a connection error, so Celery does not catch
        it and the worker exits ("Unrecoverable error"). A job that finishes later acks its
        message through the same closed channel, with the same crash.

        Here the parameters are kept from when the channel was connected (the URL does not
        change) and used once it is detached: the restore and late acks then succeed if
        Redis is back, or fail with a connection error that kombu and Celery handle (the
        message stays recorded as unacknowledged, and the visibility-timeout sweep restores
        it). A pool built for a late ack lives as long as the closed channel.
        """
        if not _KEEP_CONNPARAMS:
            return super()._connparams(asynchronous=asynchronous)
        kept = self._adk_connparams
        if kept is None:
            kept = self._adk_connparams = {}
        if getattr(self.connection, "client", None) is None:  # detached, or channel closed
            if asynchronous not in kept:
                raise RedisConnectionError("The broker connection of this channel is closed.")
            return dict(kept[asynchronous])
        params = super()._connparams(asynchronous=asynchronous)
        kept[asynchronous] = dict(params)
        return params

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous or not self.reuse_client:
            return super()._create_client(asynchronous=asynchronous)
        pool = self.pool
        cached = self._adk_client
        if cached is None or cached[0] is not pool:  # new pool after a reconnect or fork
            cached = self._adk_client = (pool, super()._create_client())
        return cached[1]


class Transport(kombu_redis.Transport):
    """kombu's Redis transport using :class:`Channel`."""

    Channel = Channel


class PlainClientChannel(Channel):
    """:class:`Channel` building a client for each operation, as kombu does."""

    reuse_client = False


class PlainClientTransport(kombu_redis.Transport):
    """kombu's Redis transport using :class:`PlainClientChannel` (client reuse off)."""

    Channel = PlainClientChannel


def transport_path(reuse_client: bool) -> str:
    """The ``broker_transport`` value for this module's transport, with or without reuse."""
    return f"{__name__}:{'Transport' if reuse_client else 'PlainClientTransport'}"
