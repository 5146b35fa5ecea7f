"""Task messages built by Celery and kombu, returned as Redis commands instead of sent.

A latency trick on kombu's private producer and channel steps, kept here alone and switched
off by ``ADK_CELERY_FAST_PUBLISH=false`` (then a job's message is sent by Celery's
``send_task`` in a thread, after its journal entry is written). :class:`CommandProducer` lets
``send_task`` build a task message and its task-sent event as usual, and returns the final
Redis commands (``LPUSH`` of the task, ``PUBLISH`` of the event) instead of running them, so
an asyncio caller sends them on its own client, inside the script that journals the job:
one round trip, no thread. Its gain is measured by ``bench/library_tricks.py``.

The kombu internals used (:data:`KOMBU_INTERNALS`) are checked by :func:`internals_present`;
:func:`collects_publishes` says no (and the plain path is taken) when one has changed, and
``tests/test_library_internals.py`` fails loudly on such a kombu.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextvars import ContextVar
from functools import cache
from typing import Any

from celery import Celery
from kombu import Producer
from kombu.transport import redis as kombu_redis

from workers.broker import transport_path

RedisCommand = tuple[str, tuple[Any, ...]]
"""A Redis command as ``(redis-py method name, arguments)``, e.g. ``("lpush", (key, data))``."""

KOMBU_INTERNALS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "Producer._prepare": (Producer, ("body", "serializer", "content_type", "content_encoding",
                                     "compression", "headers")),
    "Producer._delivery_details": (Producer, ("exchange", "delivery_mode")),
    "redis.Channel._put": (kombu_redis.Channel, ("queue", "message")),
    "redis.Channel._put_fanout": (kombu_redis.Channel, ("exchange", "message", "routing_key")),
}
"""Each private kombu callable used, with the parameters this module passes it by name."""


@cache
def internals_present() -> bool:
    """True if kombu has every internal this module uses, as it was written against.

    Each callable of :data:`KOMBU_INTERNALS` with its parameters, and the Redis channel's
    publish batches (``_publish_batch``, kombu 5.7).
    """
    for dotted, (owner, params) in KOMBU_INTERNALS.items():
        function = getattr(owner, dotted.rsplit(".", 1)[1], None)
        if function is None or not set(params) <= set(inspect.signature(function).parameters):
            return False
    return hasattr(Producer, "batch") and all(
        "_publish_batch" in inspect.getsource(step)
        for step in (kombu_redis.Channel._put, kombu_redis.Channel._put_fanout))


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


def collects_publishes(app: Celery) -> bool:
    """True if :class:`CommandProducer` works for ``app``.

    Its broker must use a channel of :mod:`workers.broker`, and kombu must have the
    internals this module uses.
    """
    transport = app.conf.broker_transport
    return transport in (transport_path(True), transport_path(False)) and internals_present()


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

    def declare(self, entity: Any) -> None:
        """Declare ``entity`` (a kombu Queue) now, as a first publish to it would: blocks."""
        key = (type(entity).__name__, entity.name)
        if key not in self._declared:
            self.maybe_declare(entity)
            self._declared.add(key)

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
            self.declare(entity)
        message = self.channel.prepare_message(
            body, priority, content_type, content_encoding, headers, properties)
        self.channel.basic_publish(message, exchange=exchange_name, routing_key=routing_key,
                                   _publish_batch=_Collected(sink))
