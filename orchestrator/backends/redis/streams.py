"""RedisEventStream: an invocation's live stream in a Redis Stream (:mod:`~orchestrator.distributed.streams`).

Committed events are added by the session append that stores them (see
:meth:`RedisEventStream.mirror_for`), chunks by :meth:`RedisEventStream.publish`; status
entries by ``RedisInvocationStore.save``, progress by the worker running a call
(:mod:`.progress`). :meth:`RedisEventStream.follow` reads the stream with ``XREAD BLOCK``.
In Redis the stream is capped at about ``STREAM_MAXLEN`` entries (approximate trimming)
and expires with the invocation record.

A chunk's entry also holds ``pub``, an id of the publish call that readers ignore: run again
(its reply lost, the client sends it again), :data:`PUBLISH_EVENT` finds it among the
stream's last entries and adds nothing.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_store import pause_over
from orchestrator.backends.redis.lua import LuaScript, Operands, key_field
from orchestrator.backends.redis.session_writer import Mirror
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.streams import (
    STREAM_MAXLEN,
    AbandonedAnswers,
    FollowDeadline,
    Progress,
    StreamItem,
    ends_follow,
)
from orchestrator.events.event import Event

_READ_COUNT = 500
"""Entries read per XREAD."""
_READ_BACK_COUNT = 200
"""Entries per XREVRANGE when reading a stream back to its latest status."""
_LATEST_LOOKBACK = 16
"""Entries read back from the end to find a stream's current item (``from_start=False``)."""
_BLOCK_MS = 1000
"""Longest single XREAD BLOCK; ``follow`` loops, so this only bounds one round trip. Kept
well under redis-py's default socket timeout (5 s), which would otherwise cut the read."""


@dataclass(frozen=True, kw_only=True)
class PublishEvent(Operands):
    """Operands of :data:`PUBLISH_EVENT`: one event added to an invocation's live stream."""

    stream: str = key_field()
    """``keys.invocation_stream``."""
    event_json: str
    partial: str
    """``"1"`` for a streaming chunk, else ``"0"``."""
    pub: str
    """Names this publish call (kept in the entry): a second run finds it and adds nothing."""
    maxlen: int
    ttl: int


PUBLISH_EVENT = LuaScript(PublishEvent, """
local done = false
for _, entry in ipairs(redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 8)) do
  local fields = entry[2]
  for i = #fields - 1, 1, -2 do
    if fields[i] == 'pub' and fields[i + 1] == pub then done = true end
  end
  if done then break end
end
if not done then
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
    'kind', 'event', 'event', event_json, 'partial', partial, 'pub', pub)
end
redis.call('EXPIRE', stream, ttl)
return done and 0 or 1
""")
"""Add the event unless one of the stream's last 8 entries is this call's own (a run whose
reply was lost); renew the stream's expiry. Reply: 1 added, 0 already there. The
orchestrator running the invocation publishes one call after the other; what others add to
the stream meanwhile (a worker's progress, a status) is a few entries at most."""


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


def _chunk(data: dict[str, Any]) -> dict[str, Any] | None:
    """A partial chunk's event wire JSON (None for a committed event or a malformed entry)."""
    if _text(data.get("partial", "")) != "1":
        return None
    try:
        chunk = json.loads(data["event"])
    except (KeyError, ValueError):
        return None
    return chunk if isinstance(chunk, dict) else None


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
        self._publish = PUBLISH_EVENT.register(client)

    async def publish(self, record: InvocationRecord, event: Event) -> None:
        """XADD the event (wire JSON) to the invocation's stream and renew its expiry.

        Once, even if the script runs twice (:data:`PUBLISH_EVENT`).
        """
        await self._publish(PublishEvent(
            stream=keys.invocation_stream(record.app_name, record.invocation_id),
            event_json=event.to_json(), partial="1" if event.partial else "0",
            pub=uuid.uuid4().hex, maxlen=self._maxlen, ttl=self._ttl))

    async def publish_partial(self, record: InvocationRecord, event: Event) -> None:
        """The event sink to use with :meth:`mirror_for`: only partial chunks here."""
        if event.partial:
            await self.publish(record, event)

    async def abandoned_chunks(
        self, record: InvocationRecord, logged: set[str]
    ) -> dict[tuple[str, str | None], str]:
        """What the latest run streamed and never committed (see ``EventStream``).

        Read back from the stream's end in pages, to its latest status entry (at most the
        stream's cap): only a recovering run of a streamed invocation asks.
        """
        answers = AbandonedAnswers(logged)
        stream = keys.invocation_stream(record.app_name, record.invocation_id)
        newest, read = "+", 0
        while read < self._maxlen:
            entries = await self._redis.xrevrange(stream, max=newest, min="-",
                                                  count=_READ_BACK_COUNT)
            for _, fields in entries:
                data = {_text(k): v for k, v in fields.items()}
                kind = _text(data.get("kind", ""))
                if not answers.read_back(kind, _chunk(data) if kind == "event" else None):
                    return answers.found
            if len(entries) < _READ_BACK_COUNT:
                break
            read += len(entries)
            newest = f"({_text(entries[-1][0])}"
        return answers.found

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
        deadline = FollowDeadline(timeout, f"Invocation {invocation_id!r}")
        last_id = after or "0-0"
        if not from_start and after is None:
            latest = await self._redis.xrevrange(stream, count=_LATEST_LOOKBACK)
            if latest:
                last_id = _text(latest[0][0])
                # The newest entry that is an item: entries that are not (a call left to an
                # outside answer) may follow the pause that is the current status.
                item = next((found for _, fields in latest
                             if (found := parse_entry(fields)) is not None), None)
                ends = ends_follow(item.status, until) if item is not None else False
                if item is not None and ends is not False and (
                        ends or item.status is not InvocationStatus.PAUSED
                        or not await pause_over(self._redis, app_name, invocation_id)):
                    yield item
                    return
        stop_at_end = False  # the last item is a status in ``until``: stop if it stays the latest
        stopped_at: InvocationStatus | None = None
        while True:
            if stop_at_end:
                block = None  # only look whether anything came after it
            else:
                remaining = deadline.remaining()
                block = _BLOCK_MS if remaining is None else max(1, min(_BLOCK_MS, int(remaining * 1000)))
            entries = _entries(await self._redis.xread({stream: last_id}, count=_READ_COUNT, block=block))
            for entry_id, fields in entries:
                last_id = entry_id
                item = parse_entry(fields)
                if item is None:  # not an item (see the module), or of a later version
                    continue
                item = dataclasses.replace(item, entry_id=_text(entry_id))
                yield item
                ends = ends_follow(item.status, until)
                if ends:
                    return
                stop_at_end = ends is None
                stopped_at = item.status
            if stop_at_end and len(entries) < _READ_COUNT:  # read to the end: still the latest
                if stopped_at is not InvocationStatus.PAUSED or not await pause_over(
                        self._redis, app_name, invocation_id):
                    return
                stop_at_end = False  # its calls are all answered: what comes next
