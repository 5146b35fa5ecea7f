"""InMemoryEventStream: an invocation's live stream inside one process (the embedded mode).

The same entries and ``follow`` as the Redis stream (see :mod:`~orchestrator.distributed.streams`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field

from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.streams import (
    STREAM_MAXLEN,
    AbandonedAnswers,
    FollowDeadline,
    StreamItem,
    ends_follow,
)
from orchestrator.events.event import Event

PauseOver = Callable[[str, str], Awaitable[bool]]
"""``await pause_over(app_name, invocation_id)``: True if the invocation is no longer paused,
or its pause has every answer stored (see ``invocation_store.pause_over`` for Redis)."""


@dataclass
class _Log:
    items: deque[StreamItem]
    total: int = 0
    """Items ever appended (positions are absolute; trimmed ones are gone)."""
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)


class InMemoryEventStream:
    """The live stream inside one process (embedded mode): same API as RedisEventStream.

    Status entries come from :meth:`publish_status`, which the embedded runtime's store calls
    when it saves a record. Streams are kept (up to ``maxlen`` entries each) for the life of
    the object; :meth:`discard` drops one.
    """

    def __init__(self, *, maxlen: int = STREAM_MAXLEN, pause_over: PauseOver | None = None) -> None:
        self._maxlen = maxlen
        self._logs: dict[tuple[str, str], _Log] = {}
        self._pause_over = pause_over
        """Whether a pause read as the latest entry is over (every call answered, its
        resume queued): a follow goes on past it then, as the Redis stream's does."""

    def _log(self, app_name: str, invocation_id: str) -> _Log:
        key = (app_name, invocation_id)
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = _Log(items=deque(maxlen=self._maxlen))
        return log

    async def _append(self, app_name: str, invocation_id: str, item: StreamItem) -> None:
        log = self._log(app_name, invocation_id)
        async with log.changed:
            log.items.append(item)
            log.total += 1
            log.changed.notify_all()

    async def publish(self, record: InvocationRecord, event: Event) -> None:
        """Append a copy of the event (later changes to the object do not show)."""
        await self._append(record.app_name, record.invocation_id,
                           StreamItem.of_event(event.model_copy(deep=True)))

    async def publish_status(self, app_name: str, invocation_id: str, status: InvocationStatus) -> None:
        """Append a status change."""
        await self._append(app_name, invocation_id, StreamItem.of_status(status))

    async def abandoned_chunks(
        self, record: InvocationRecord, logged: set[str]
    ) -> dict[tuple[str, str | None], str]:
        """What the latest run streamed and never committed (see ``EventStream``)."""
        answers = AbandonedAnswers(logged)
        log = self._logs.get((record.app_name, record.invocation_id))
        for item in reversed(log.items if log is not None else ()):
            chunk = (item.event.model_dump(mode="json", include={"id", "author", "branch"})
                     if item.partial and item.event is not None else None)
            if not answers.read_back(item.kind, chunk):
                break
        return answers.found

    def discard(self, app_name: str, invocation_id: str) -> None:
        """Forget an invocation's stream."""
        self._logs.pop((app_name, invocation_id), None)

    async def follow(
        self,
        app_name: str,
        invocation_id: str,
        *,
        from_start: bool = True,
        until: Collection[InvocationStatus] = InvocationStatus.SETTLED,
        timeout: float | None = None,
    ) -> AsyncIterator[StreamItem]:
        """Yield the invocation's events and status changes in order (see RedisEventStream)."""
        log = self._log(app_name, invocation_id)
        deadline = FollowDeadline(timeout, f"Invocation {invocation_id!r}")
        position = 0
        if not from_start:
            position = log.total
            latest = log.items[-1] if log.items else None
            ends = ends_follow(latest.status, until) if latest is not None else False
            if latest is not None and ends is not False and (
                    ends or not await self._over(latest, app_name, invocation_id)):
                yield latest
                return
        while True:
            async with log.changed:
                while position >= log.total:
                    try:
                        await asyncio.wait_for(log.changed.wait(), deadline.remaining())
                    except TimeoutError:
                        deadline.remaining()  # raises, with a message, once the time is up
                first = log.total - len(log.items)
                position = max(position, first)
                batch = list(itertools.islice(log.items, position - first, None))
                position = log.total
            for index, item in enumerate(batch):
                yield item
                ends = ends_follow(item.status, until)
                if ends or (ends is None and index == len(batch) - 1 and position == log.total
                            and not await self._over(item, app_name, invocation_id)):
                    return

    async def _over(self, item: StreamItem, app_name: str, invocation_id: str) -> bool:
        """True for a latest ``paused`` entry whose pause has every answer stored."""
        return (item.status is InvocationStatus.PAUSED and self._pause_over is not None
                and await self._pause_over(app_name, invocation_id))
