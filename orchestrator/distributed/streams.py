"""Live event streams: every event of an invocation, as it happens, replayable from its start.

An invocation's stream holds, in order, two kinds of entries:

- ``{"kind": "event", "event": <Event wire JSON>, "partial": "1"|"0"}``: every event of the
  invocation (its user message first), streaming chunks (``partial``) included. Committed
  events are added by the session append that stores them (see
  :meth:`RedisEventStream.mirror_for`), chunks by :meth:`RedisEventStream.publish`;
- ``{"kind": "status", "status": <InvocationStatus value>, "record": <record JSON>}``: each
  status change, published by the invocation store when it saves the record
  (``RedisInvocationStore.save``), with the record as saved (waiters need no extra read);
- ``{"kind": "progress", "call": ..., "tool": ..., "attempt": ..., "at": ..., "progress": ...}``:
  a remote call's ``report_progress``, added by the worker running it
  (:mod:`orchestrator.backends.redis.progress`); it never ends a follow.

Both are written by the process running the invocation, one after the other, so a follower
sees a run's events before the status that ends it. :meth:`RedisEventStream.follow` reads the
stream with ``XREAD BLOCK`` from its first entry (replay) or from now on, and stops at a
finished status, or at the current status if it is in ``until`` (``paused`` by default). A
follower may start before the invocation does (it waits for the stream to appear) or after
it finished (it replays everything, then the final status).

In Redis the stream is capped at about :data:`STREAM_MAXLEN` entries (approximate trimming)
and expires with the invocation record; a very long streamed run keeps its latest entries.
:class:`InMemoryEventStream` is the same thing inside one process, for the embedded mode.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import redis.asyncio as aioredis

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.session_writer import Mirror
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.events.event import Event

STREAM_MAXLEN = 5000
"""Approximate cap on the entries of one invocation's stream (``XADD MAXLEN ~``)."""

_READ_COUNT = 500
"""Entries read per XREAD."""
_BLOCK_MS = 1000
"""Longest single XREAD BLOCK; ``follow`` loops, so this only bounds one round trip. Kept
well under redis-py's default socket timeout (5 s), which would otherwise cut the read."""


@dataclass(frozen=True)
class Progress:
    """One progress report of a remote call (``tool_context.report_progress`` on a worker)."""

    function_call_id: str
    tool: str
    attempt: int
    at: float
    """When the worker reported it (epoch seconds, the worker's clock)."""
    payload: dict[str, Any]
    """What the tool reported."""

    def to_json(self) -> dict[str, Any]:
        """The report as clients see it (camelCase, like events)."""
        return {"functionCallId": self.function_call_id, "tool": self.tool,
                "attempt": self.attempt, "at": self.at, "progress": self.payload}


@dataclass(frozen=True)
class StreamItem:
    """One entry of an invocation's live stream: an event, a status change, or progress."""

    kind: Literal["event", "status", "progress"]
    event: Event | None = None
    """The event (``kind == "event"``): committed, or a streaming chunk when ``partial``."""
    status: InvocationStatus | None = None
    """The invocation's new status (``kind == "status"``)."""
    progress: Progress | None = None
    """A remote call's progress report (``kind == "progress"``)."""
    entry_id: str | None = None
    """Its position in the stream (Redis), to resume a follow after it (``after``)."""

    @property
    def partial(self) -> bool:
        """True for a streaming chunk (never stored in the session)."""
        return self.event is not None and bool(self.event.partial)

    @classmethod
    def of_event(cls, event: Event) -> StreamItem:
        """An event entry."""
        return cls(kind="event", event=event)

    @classmethod
    def of_status(cls, status: InvocationStatus) -> StreamItem:
        """A status entry."""
        return cls(kind="status", status=status)


class EventStream(Protocol):
    """What the Redis and in-memory live streams share."""

    async def publish(self, record: InvocationRecord, event: Event) -> None:
        """Append ``event`` to the stream of ``record``'s invocation (an event sink)."""
        ...

    def follow(
        self,
        app_name: str,
        invocation_id: str,
        *,
        from_start: bool = True,
        until: Collection[InvocationStatus] = InvocationStatus.SETTLED,
        timeout: float | None = None,
    ) -> AsyncIterator[StreamItem]:
        """The invocation's entries as they come, up to a status in ``until``."""
        ...


def ends_follow(status: InvocationStatus | None, until: Collection[InvocationStatus]) -> bool | None:
    """Whether a follow stops after an entry with ``status`` (None: not a status entry).

    True: stop after it. None: stop only if nothing follows it yet. False: go on. A finished
    status always ends a follow (nothing comes after it). An unfinished one in ``until``
    (``paused``) ends it only while it is the latest entry: a replay goes past the pauses the
    invocation has since resumed from.
    """
    if status is None:
        return False
    if status.is_finished:
        return True
    return None if status in until else False


class _Deadline:
    def __init__(self, timeout: float | None, what: str) -> None:
        self._at = None if timeout is None else time.monotonic() + timeout
        self._timeout = timeout
        self._what = what

    def remaining(self) -> float | None:
        """Seconds left (None = no limit); raises TimeoutError once none are."""
        if self._at is None:
            return None
        left = self._at - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self._what} did not reach the end of its follow within "
                               f"{self._timeout} s.")
        return left


# ---- Redis ------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_entry(fields: dict[Any, Any]) -> StreamItem | None:
    """A stream entry as an item; None for kinds this version does not know."""
    data = {_text(k): v for k, v in fields.items()}
    kind = _text(data.get("kind", ""))
    if kind == "event" and "event" in data:
        return StreamItem.of_event(Event.from_wire(data["event"]))
    if kind == "status" and "status" in data:
        try:
            return StreamItem.of_status(InvocationStatus(_text(data["status"])))
        except ValueError:
            return None
    if kind == "progress":
        try:
            payload = json.loads(data["progress"])
            return StreamItem(kind="progress", progress=Progress(
                function_call_id=_text(data["call"]), tool=_text(data.get("tool", "")),
                attempt=int(data.get("attempt", 0)), at=float(data.get("at", 0.0)),
                payload=payload if isinstance(payload, dict) else {"value": payload}))
        except (KeyError, ValueError, TypeError):
            return None
    return None


def _entries(reply: Any) -> list[tuple[str, dict[Any, Any]]]:
    """The entries of a one-stream XREAD reply (RESP2 list or RESP3 map)."""
    if not reply:
        return []
    streams = reply.values() if isinstance(reply, dict) else [entries for _, entries in reply]
    out: list[tuple[str, dict[Any, Any]]] = []
    for entries in streams:
        if entries and isinstance(entries[0], list):
            entries = entries[0]  # RESP3 wraps the entries once more
        out += [(_text(entry_id), fields) for entry_id, fields in entries]
    return out


class RedisEventStream:
    """An invocation's live events in a Redis Stream (``keys.invocation_stream``).

    ``publish`` is the InvocationService ``event_sink`` of orchestrators; ``follow`` is for
    anyone, on any machine, who wants to watch an invocation.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        ttl_seconds: int = 7 * 24 * 3600,
        maxlen: int = STREAM_MAXLEN,
    ) -> None:
        self._redis = client
        self._ttl = ttl_seconds
        """The stream expires with the invocation record (its TTL is renewed on each write)."""
        self._maxlen = maxlen

    async def publish(self, record: InvocationRecord, event: Event) -> None:
        """XADD the event (wire JSON) to the invocation's stream and renew its expiry."""
        stream = keys.invocation_stream(record.app_name, record.invocation_id)
        entry = {"kind": "event", "event": event.to_json(), "partial": "1" if event.partial else "0"}
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xadd(stream, entry, maxlen=self._maxlen, approximate=True)  # type: ignore[arg-type]
            pipe.expire(stream, self._ttl)
            await pipe.execute()

    async def publish_partial(self, record: InvocationRecord, event: Event) -> None:
        """The event sink to use with :meth:`mirror_for`: only partial chunks here."""
        if event.partial:
            await self.publish(record, event)

    def mirror_for(self, record: InvocationRecord) -> Mirror:
        """The live stream of ``record``'s invocation, for a leased writer to mirror to.

        Each append adds its event in its own script: a follower sees an event exactly when
        it is committed.
        """
        return Mirror(keys.invocation_stream(record.app_name, record.invocation_id),
                      self._maxlen, self._ttl)

    @staticmethod
    def saver(mirror: Mirror) -> Callable[[InvocationRecord], None]:
        """A function saving a record (and its status) in ``mirror``'s next append."""

        def save_with_next_append(changed: InvocationRecord) -> None:
            mirror.with_next_append(
                keys.invocation(changed.app_name, changed.invocation_id),
                keys.invocation_statuses(changed.app_name, changed.invocation_id),
                changed.model_dump_json(), changed.status.value,
            )

        return save_with_next_append

    async def follow(
        self,
        app_name: str,
        invocation_id: str,
        *,
        from_start: bool = True,
        until: Collection[InvocationStatus] = InvocationStatus.SETTLED,
        timeout: float | None = None,
        after: str | None = None,
    ) -> AsyncIterator[StreamItem]:
        """Yield the invocation's events and status changes in order, as they are published.

        ``from_start``: replay from the first entry (default), else only what comes next
        (but a stream that already ends with a status that would stop the follow yields just
        that status). ``after``: resume after that entry (a :attr:`StreamItem.entry_id`).
        Stops after a finished status, and after a status in ``until`` (default:
        ``paused``) that is the latest entry when read, i.e. the invocation's current
        status. Raises TimeoutError when ``timeout`` seconds pass first. Entries of unknown
        kinds are skipped. Each item carries its ``entry_id``.
        """
        stream = keys.invocation_stream(app_name, invocation_id)
        deadline = _Deadline(timeout, f"Invocation {invocation_id!r}")
        last_id = after or "0-0"
        if not from_start and after is None:
            latest = await self._redis.xrevrange(stream, count=1)
            if latest:
                last_id = _text(latest[0][0])
                item = parse_entry(latest[0][1])
                if item is not None and ends_follow(item.status, until) is not False:
                    yield item
                    return
        while True:
            remaining = deadline.remaining()
            block = _BLOCK_MS if remaining is None else max(1, min(_BLOCK_MS, int(remaining * 1000)))
            entries = _entries(await self._redis.xread({stream: last_id}, count=_READ_COUNT, block=block))
            for position, (entry_id, fields) in enumerate(entries):
                last_id = entry_id
                item = parse_entry(fields)
                if item is None:
                    continue
                item = dataclasses.replace(item, entry_id=_text(entry_id))
                yield item
                ends = ends_follow(item.status, until)
                if ends or (ends is None and position == len(entries) - 1
                            and not await self._redis.xread({stream: last_id}, count=1)):
                    return


# ---- in memory ----------------------------------------------------------------------------


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

    def __init__(self, *, maxlen: int = STREAM_MAXLEN) -> None:
        self._maxlen = maxlen
        self._logs: dict[tuple[str, str], _Log] = {}

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
        deadline = _Deadline(timeout, f"Invocation {invocation_id!r}")
        position = 0
        if not from_start:
            position = log.total
            if log.items and ends_follow(log.items[-1].status, until) is not False:
                yield log.items[-1]
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
                if ends or (ends is None and index == len(batch) - 1 and position == log.total):
                    return
