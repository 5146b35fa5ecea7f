"""kombu's Redis transport, with one Redis client per channel and publishes that can be collected.

kombu builds a new ``redis.Redis`` object for nearly every broker operation (each publish,
ack, task event and prefetch bookkeeping step). With redis-py 8 each construction copies a
table of several hundred response callbacks, which costs more than the Redis command itself.
The clients are interchangeable (they share the channel's connection pool and are
thread-safe), so this channel builds one and reuses it until the pool is replaced.

:class:`CommandProducer` lets Celery's ``send_task`` build a task message and its task-sent
event as usual, and returns the final Redis commands (``LPUSH`` of the task, ``PUBLISH`` of
the event) instead of running them, so an asyncio caller can send them on its own client
without a blocking call or a thread hop. Selected with ``broker_transport`` in
:mod:`workers.celery_app`; messages and queues are exactly kombu's, so plain Celery clients,
workers and Flower interoperate unchanged.

The channel also keeps the connection parameters it was opened with, so that closing it
after the broker connection was lost (a Redis restart) puts its unacknowledged messages back
instead of crashing the worker (see :meth:`Channel._connparams`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import kombu
from celery import Celery
from kombu import Producer
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

RedisCommand = tuple[str, tuple[Any, ...]]
"""A Redis command as ``(redis-py method name, arguments)``, e.g. ``("lpush", (key, data))``."""


class _Collected:
    """What kombu's Redis channel hands a publish's final commands to (``_publish_batch``).

    kombu routes the message as for a real publish and calls :meth:`add` with each Redis
    command instead of running it (the hook of its publish batches).
    """

    def __init__(self, sink: list[RedisCommand]) -> None:
        self._sink = sink

    def add(self, name: str, *args: Any) -> None:
        """Keep one final Redis command of the message being routed."""
        self._sink.append((name, args))


_KEEP_CONNPARAMS = (kombu.VERSION.major, kombu.VERSION.minor) <= (5, 7)
"""Whether :meth:`Channel._connparams` works around kombu's crash on a lost connection.

Seen with kombu 5.7.0, the newest release when this was written (the same crash was reported
against kombu 3.0 in celery/kombu#582). Check whether a later kombu still needs it (the
tests in tests/test_redis_restart.py fail without it) before widening the range.
"""


class Channel(kombu_redis.Channel):
    """kombu's Redis channel with its synchronous client built once per connection pool."""

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


def collects_publishes(app: Celery) -> bool:
    """True if :class:`CommandProducer` works for ``app``.

    It needs this module's transport and kombu's publish batches (kombu 5.7 and later).
    """
    return app.conf.broker_transport == f"{__name__}:Transport" and hasattr(Producer, "batch")


_sink: ContextVar[list[RedisCommand] | None] = ContextVar("adk_celery_publish_sink", default=None)


class CommandProducer(Producer):
    """A kombu Producer whose publishes become Redis commands, returned instead of sent.

    Celery's ``send_task`` takes it as its ``producer``: Celery builds the task message and
    its task-sent event as usual, and each ``publish`` serialises, wraps and routes the
    message with kombu's own producer and channel steps (``_prepare``, ``prepare_message``,
    ``basic_publish``), skipping only what a publish that sends nothing does not need: the
    connection retry wrapper, and declaring again what this producer declared once. Building
    one connects to the broker; so does the first publish to a queue (kombu declares it).
    Those calls block: make them off the event loop.
    """

    def __init__(self, app: Celery) -> None:
        self._connection = app.connection_for_write()
        super().__init__(self._connection.default_channel, auto_declare=False)
        self._declared: set[tuple[str, str]] = set()

    def has_declared(self, queue: str) -> bool:
        """True once a publish to ``queue`` declared it (later publishes to it never block)."""
        return ("Queue", queue) in self._declared

    def commands(self, send: Callable[[Producer], object]) -> list[RedisCommand]:
        """Run ``send(self)``; return the Redis commands of what it published, in order."""
        sink: list[RedisCommand] = []
        token = _sink.set(sink)
        try:
            send(self)
        finally:
            _sink.reset(token)
        return sink

    def publish(  # type: ignore[override]  # kombu's signature, as Celery calls it
        self, body: Any, routing_key: str | None = None, delivery_mode: Any = None,
        mandatory: bool = False, immediate: bool = False, priority: int = 0,
        content_type: str | None = None, content_encoding: str | None = None,
        serializer: str | None = None, headers: dict[str, Any] | None = None,
        compression: str | None = None, exchange: Any = None, retry: bool = False,
        retry_policy: dict[str, Any] | None = None, declare: list[Any] | None = None,
        expiration: float | None = None, timeout: float | None = None,
        confirm_timeout: float | None = None, **properties: Any,
    ) -> None:
        """Collect the Redis commands that publishing this message takes."""
        sink = _sink.get()
        if sink is None:
            raise RuntimeError("CommandProducer.publish runs only inside commands().")
        headers = {} if headers is None else headers
        routing_key = self.routing_key if routing_key is None else routing_key
        exchange_name, properties["delivery_mode"] = self._delivery_details(
            exchange or self.exchange, delivery_mode)
        if expiration is not None:
            properties["expiration"] = str(int(expiration * 1000))
        body, content_type, content_encoding = self._prepare(
            body, serializer, content_type, content_encoding, compression, headers)
        for entity in declare or ():
            key = (type(entity).__name__, entity.name)
            if key not in self._declared:
                self.maybe_declare(entity)
                self._declared.add(key)
        message = self.channel.prepare_message(
            body, priority, content_type, content_encoding, headers, properties)
        self.channel.basic_publish(message, exchange=exchange_name, routing_key=routing_key,
                                   _publish_batch=_Collected(sink))
