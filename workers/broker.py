"""kombu's Redis transport, with one Redis client per channel and publishes that can be collected.

kombu builds a new ``redis.Redis`` object for nearly every broker operation (each publish,
ack, task event and prefetch bookkeeping step). With redis-py 8 each construction copies a
table of several hundred response callbacks, which costs more than the Redis command itself.
The clients are interchangeable (they share the channel's connection pool and are
thread-safe), so this channel builds one and reuses it until the pool is replaced.

:func:`collect_publishes` runs a Celery send with kombu's own message building and routing,
but keeps the final Redis commands (``LPUSH`` of the task, ``PUBLISH`` of its task-sent
event) instead of running them, so an asyncio caller can send them on its own client without
a blocking call or a thread hop. Selected with ``broker_transport`` in
:mod:`workers.celery_app`; messages and queues are exactly kombu's, so plain Celery clients,
workers and Flower interoperate unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from celery import Celery
from kombu import Producer
from kombu.transport import redis as kombu_redis

RedisCommand = tuple[str, tuple[Any, ...]]
"""A Redis command as ``(redis-py method name, arguments)``, e.g. ``("lpush", (key, data))``."""

_collecting: ContextVar[list[RedisCommand] | None] = ContextVar(
    "adk_celery_collecting_publishes", default=None
)


class CollectedBatch:
    """A kombu publish batch that keeps the Redis commands of each publish and runs none.

    It has the interface of kombu's ``PublishBatch``: kombu routes each message through the
    channel as for a real publish and hands the final commands to :meth:`add`.
    """

    def __init__(self, channel: Channel, sink: list[RedisCommand]) -> None:
        self.channel = channel
        self._sink = sink

    def publish(self, message: dict[str, Any], **kwargs: Any) -> None:
        """Route one prepared message; its commands land in the sink."""
        self.channel.basic_publish(message, _publish_batch=self, **kwargs)

    def add(self, name: str, *args: Any) -> None:
        """Keep one final Redis command of the message being routed."""
        self._sink.append((name, args))

    def flush(self) -> None:
        """Nothing to run: the caller sends the collected commands."""

    def discard(self) -> None:
        """Forget what was collected (the send failed part way)."""
        self._sink.clear()

    def close(self) -> None:
        """Nothing to release."""


class Channel(kombu_redis.Channel):
    """kombu's Redis channel: one synchronous client per connection pool; collectable publishes."""

    _adk_client: tuple[Any, Any] | None = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        pool = self.pool
        cached = self._adk_client
        if cached is None or cached[0] is not pool:  # new pool after a reconnect or fork
            cached = self._adk_client = (pool, super()._create_client())
        return cached[1]

    @property
    def supports_batch_publish(self) -> bool:
        """Collected batches run nothing, so they are safe whatever the retry settings."""
        return _collecting.get() is not None or bool(super().supports_batch_publish)

    def create_publish_batch(self, max_size: int) -> Any:
        """A collected batch inside :func:`collect_publishes`, else kombu's own."""
        sink = _collecting.get()
        if sink is None:
            return super().create_publish_batch(max_size)
        return CollectedBatch(self, sink)


class Transport(kombu_redis.Transport):
    """kombu's Redis transport using :class:`Channel`."""

    Channel = Channel


def collects_publishes(app: Celery) -> bool:
    """True if :func:`collect_publishes` works for ``app``.

    It needs this module's transport and kombu's publish batches (kombu 5.7 and later).
    """
    return app.conf.broker_transport == f"{__name__}:Transport" and hasattr(Producer, "batch")


def collect_publishes(app: Celery, send: Callable[[Any], object]) -> list[RedisCommand]:
    """Run ``send(producer)`` and return the Redis commands its publishes would have run.

    ``send`` publishes through the given producer (``app.send_task(..., producer=producer)``).
    Nothing is sent to the broker except, the first time a producer's connection sees a
    queue, kombu's declaration of it. Raises RuntimeError if a publish ran without being
    collected (the app does not use this module's transport).
    """
    sink: list[RedisCommand] = []
    token = _collecting.set(sink)
    try:
        with app.producer_or_acquire() as producer, producer.batch():
            send(producer)
    finally:
        _collecting.reset(token)
    if not sink:
        raise RuntimeError("No publish was collected: the broker transport is not workers.broker's.")
    return sink
