"""Wake-ups: how new work for a session reaches an orchestrator (the interface).

Whoever queues work for a session (a new message, a worker's result, an answer from outside,
a cancel) pushes the item on the session's queue and posts a wake-up naming the session and
the item's invocation. Each wake-up reaches one orchestrator, which drains the session
(:meth:`~orchestrator.distributed.service.InvocationService.drain`) until its queue is empty;
one whose drain did not finish (the orchestrator died) reaches another one later.

The Redis back-end posts them on a stream read through a consumer group
(:mod:`orchestrator.backends.redis.wakeups`). The embedded mode needs none: whoever pushes
an item drains the session itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from orchestrator.distributed.stores import SessionKey

DrainHandler = Callable[[SessionKey, str | None], Awaitable[bool]]
"""``await drain(key, hint)``: True once the session was drained, False if its lease was
busy; ``hint`` is the invocation the wake-up announced, if it named one."""


class WakeupConsumer(Protocol):
    """Reads wake-ups and drains their sessions until stopped."""

    def start(self) -> None:
        """Start reading (on the running loop)."""
        ...

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop reading; drains in progress get ``timeout`` seconds, then are cancelled."""
        ...


class Wakeups(Protocol):
    """Where wake-ups are posted, and read by the orchestrators."""

    async def post(self, key: SessionKey, invocation_id: str = "") -> None:
        """Ask an orchestrator to drain ``key``; ``invocation_id``: the one expected first."""
        ...

    def consumer(
        self,
        drain: DrainHandler,
        *,
        concurrency: int = 64,
        retry_seconds: float = 1.0,
        reclaim_idle_seconds: float = 30.0,
        name: str | None = None,
    ) -> WakeupConsumer:
        """A consumer that drains the sessions the wake-ups announce (start it on a loop)."""
        ...
