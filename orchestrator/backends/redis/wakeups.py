"""RedisWakeups: how new work for a session reaches an orchestrator, through one Redis Stream.

The interface is :mod:`orchestrator.distributed.wakeups`.

Whoever queues work for a session (a new message, a worker's result, an answer from outside,
a cancel) pushes the item on the session's queue and, in the same round trip, adds a wake-up
entry ``{app, user, session, inv}`` (``inv``: the item's invocation) to the wake stream of the
invocations queue. Every orchestrator reads that stream through one consumer group, so each
entry reaches one orchestrator, which drains the session (see
:meth:`InvocationService.drain`): a drain works until the session's queue is empty. How an
orchestrator reads, drains and acknowledges the entries is :mod:`.wake_consumer`'s.

This replaces a Celery task per wake-up: reading a stream in the orchestrator's own event
loop costs a fraction of a Celery task's consume, ack and task events, and a batch of
wake-ups arrives in one read.
"""

from __future__ import annotations

import os
import socket

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from orchestrator.backends.redis.wake_consumer import WakeConsumer
from orchestrator.distributed.stores import SessionKey
from orchestrator.distributed.wakeups import DrainHandler

GROUP = "orchestrators"
"""The consumer group every orchestrator reads the wake stream through."""


class RedisWakeups:
    """The wake stream of one invocations queue: post entries, or consume them."""

    def __init__(self, client: aioredis.Redis, stream_key: str, *, group: str = GROUP) -> None:
        self.client = client
        """The Redis client the stream is read and written through."""
        self.stream_key = stream_key
        self.group = group
        """The consumer group the orchestrators read the stream through."""

    async def post(self, key: SessionKey, invocation_id: str = "") -> None:
        """Ask an orchestrator to drain ``key``, with no item pushed along.

        ``invocation_id`` names the invocation expected first: the orchestrator reads it in
        the round trip that takes the session. (Pushes post their wake-up in their own script:
        ``push_item`` of :mod:`.session_queue`, with the same fields.)
        """
        fields = {"app": key[0], "user": key[1], "session": key[2]}
        if invocation_id:
            fields["inv"] = invocation_id
        await self.client.xadd(self.stream_key, fields)  # type: ignore[arg-type]

    async def pending(self) -> int:
        """Entries delivered to an orchestrator and not yet acknowledged."""
        try:
            info = await self.client.xpending(self.stream_key, self.group)
        except ResponseError:  # no stream or no group yet
            return 0
        return int(info["pending"])

    async def ensure_group(self) -> None:
        """Create the consumer group (from the stream's start: earlier entries count too)."""
        try:
            await self.client.xgroup_create(self.stream_key, self.group, id="0", mkstream=True)
        except ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise

    def consumer(
        self,
        drain: DrainHandler,
        *,
        concurrency: int = 64,
        retry_seconds: float = 1.0,
        reclaim_idle_seconds: float = 30.0,
        name: str | None = None,
    ) -> WakeConsumer:
        """A consumer that drains the sessions this stream announces (start it on a loop)."""
        return WakeConsumer(
            self, drain, concurrency=concurrency, retry_seconds=retry_seconds,
            reclaim_idle_seconds=reclaim_idle_seconds,
            name=name or f"{socket.gethostname()}:{os.getpid()}",
        )
