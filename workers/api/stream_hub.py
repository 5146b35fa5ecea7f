"""One reader of the live event streams per API process, handing each follower its entries.

Every open ``/run``, ``/run_sse`` and invocation follow waits on its invocation's live stream
(:mod:`orchestrator.distributed.streams`). Followed one by one, each would hold a Redis
connection in a blocking ``XREAD`` of its own and pay a round trip per wake-up; here one loop
per process reads every followed stream in one ``XREAD BLOCK`` and hands each follower (a
:class:`~workers.api.watches.Watch`) the entries of its stream, parsed once for all the
followers of that stream.

A follower that starts while that read is blocked must get into the next one: it adds an
entry to the process's own wake stream (``keys.api_wake``), which the read also names,
so the read returns and the next one names the new stream. The read names the wake stream
with the last id it saw (not ``$``): a wake-up that reaches Redis before the read does still
ends it at once.

Events stay the wire JSON the stream holds (:class:`~workers.api.watches.LiveItem`). A
follower of a status stream that needs the invocation's events once it finishes (``/run``)
gets them with its finished status: the reader reads them in the same write to Redis as its
next read (:class:`~workers.api.watches.Watch`), no round trip of the follower's own.

Its XREAD goes straight to a connection of its own, without redis-py's per-command layers
(a pooled connection taken and given back, metrics hooks, the reply reshaped), retried and
reconnected with the project's client policy.

One ``XREAD`` names many keys, so the followed streams must live on one Redis server, as
everything else this project keeps does (it does not speak Redis Cluster).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Collection
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.connection import connect
from orchestrator.backends.redis.invocation_store import pause_over
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.streams import ends_follow
from workers.api.outages import ServerStopping
from workers.api.watches import LiveItem, Watch, position_of

logger = logging.getLogger(__name__)

_READ_COUNT = 500
"""Entries read per stream per XREAD (a longer stream is read over several)."""
_BLOCK_MS = 1000
"""Longest single XREAD BLOCK: the loop reads again after it, so it only bounds one call."""
_WAKE_TTL_SECONDS = 3600
"""The wake stream outlives its process by at most this long."""
_WAKE_RENEW_SECONDS = 60.0
"""How often a wake-up also renews the wake stream's lifetime (else it is one XADD)."""
_READ_MARGIN_SECONDS = 5.0
"""How much longer than its block a read may take before it counts as failed."""
_RETRY_SECONDS = 0.5
"""Pause before reading again after a read failed (its followers were told)."""


def _at(watch: Watch) -> tuple[int, int]:
    return watch.position


class StreamHub:
    """The process's one reader of live streams (see the module docstring); one per event loop.

    ``nudger``: a client of the server's own pool, to wake the reader with (and for a
    follower's look at a pause, :meth:`follow`). ``block_ms`` and
    ``read_count`` bound one read (its wait and its entries per stream).
    """

    def __init__(self, redis_url: str, nudger: aioredis.Redis, *, block_ms: int = _BLOCK_MS,
                 read_count: int = _READ_COUNT) -> None:
        self.loop = asyncio.get_running_loop()
        self._block_ms = block_ms
        self._stopping = False
        self._read_count = read_count
        self._reader = connect(redis_url)
        # The connection that blocks in XREAD, used without redis-py's per-command machinery
        # (a pooled connection taken and given back, metrics hooks, the reply reshaped): that
        # is about as much CPU again as the read. Sending has no timeout of its own (redis-py
        # would send through asyncio.wait_for, a task per command); each read has one.
        self._connection = self._reader.connection_pool.make_connection()
        self._connection.socket_timeout = None
        self._nudger = nudger
        self._wake_key = keys.api_wake(uuid.uuid4().hex)
        self._wake_last = "0-0"
        self._wake_renewed = -_WAKE_RENEW_SECONDS
        """When a wake-up last renewed the wake stream's lifetime (monotonic seconds)."""
        self._watches: dict[str, set[Watch]] = {}
        self._task: asyncio.Task[None] | None = None
        self._blocked = False
        """A read is out that names only the streams followed when it was sent."""
        self._nudged = False
        """A wake-up was sent since that read went out."""
        self._more: set[str] = set()
        """Streams whose last read was cut at the count: read on without blocking."""
        self._nudges: set[asyncio.Task[None]] = set()
        self._events_wanted: dict[Watch, None] = {}
        """Watches whose invocation finished, waiting for its events (read in order)."""
        self._failing = False
        """The last read failed (logged once an outage)."""

    @contextlib.asynccontextmanager
    async def watch(self, app_name: str, invocation_id: str, after: str | None = None, *,
                    statuses: bool = False, wake: bool = True) -> AsyncIterator[Watch]:
        """Follow an invocation's live stream from its start, or after entry ``after``.

        ``statuses``: its status stream instead (``keys.invocation_statuses``: the
        status entries only), and its events once it finishes (:attr:`Watch.events`).
        ``wake=False``: the caller sends the wake-up the reader may need to see the new
        watch itself, with :meth:`queue_wake` in a transaction of its own (the enqueue that
        starts the invocation), instead of a command of its own.
        """
        stream = keys.invocation_stream(app_name, invocation_id)
        if statuses:
            watch = Watch(keys.invocation_statuses(app_name, invocation_id), after or "0-0",
                          events_key=stream)
        else:
            watch = Watch(stream, after or "0-0")
        self._watches.setdefault(watch.key, set()).add(watch)
        if self._stopping:
            watch.fail(ServerStopping())
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._read_loop(), name="adk-celery stream hub")
        elif wake and self._blocked and not self._nudged:
            self._nudged = True
            nudge = asyncio.create_task(self._nudge())
            self._nudges.add(nudge)
            nudge.add_done_callback(self._nudges.discard)
        try:
            yield watch
        finally:
            followers = self._watches.get(watch.key)
            if followers is not None:
                followers.discard(watch)
                if not followers:
                    del self._watches[watch.key]

    async def follow(
        self, app_name: str, invocation_id: str, *,
        until: Collection[InvocationStatus] = InvocationStatus.SETTLED, after: str | None = None,
        timeout: float | None = None, answered_pauses: bool = False,
    ) -> AsyncIterator[LiveItem]:
        """The invocation's entries in order, as ``RedisEventStream.follow`` yields them.

        Replayed from its start (or after ``after``); stops after a terminal status, and
        after a status in ``until`` that is the stream's latest entry when read. But not at
        a pause whose calls all have their answers stored (its resume queued, the
        orchestrator has not taken it yet): that pause is over, and the follow reads on to
        what the answers bring (:func:`~orchestrator.backends.redis.invocation_store.pause_over`,
        as ``RedisEventStream.follow``), unless ``answered_pauses`` (the stream's end as it
        stands is wanted). TimeoutError if ``timeout`` seconds pass first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        async with self.watch(app_name, invocation_id, after) as watch:
            stop_at_end = False
            stopped_at: InvocationStatus | None = None
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                try:
                    if left is not None and left <= 0:
                        raise TimeoutError
                    items, at_end = await watch.read(left)
                except TimeoutError:
                    raise TimeoutError(f"Invocation {invocation_id!r} did not reach the end of "
                                       f"its follow within {timeout} s.") from None
                for item in items:
                    if item.kind == "waiting":  # not an item of a follow: the pause stays the latest
                        continue
                    yield item
                    ends = ends_follow(item.status, until)
                    if ends:
                        return
                    stop_at_end = ends is None
                    stopped_at = item.status
                if stop_at_end and at_end:
                    if (stopped_at is not InvocationStatus.PAUSED or answered_pauses
                            or not await pause_over(self._nudger, app_name, invocation_id)):
                        return
                    stop_at_end = False  # its calls are all answered: what comes next

    def stop_followers(self) -> None:
        """The server is stopping: each follower, and each that starts from now on, ends.

        Its read raises :class:`ServerStopping` (an SSE follow ends with an error frame, a
        ``/run`` answers 503 naming its invocation), within the graceful shutdown's time.
        """
        self._stopping = True
        self._fail_all(ServerStopping())

    async def aclose(self) -> None:
        """Stop reading; followers still waiting get an error."""
        for task in (self._task, *self._nudges):
            # Python 3.11's wait_for (redis-py sends through it) can swallow a cancellation
            # that lands as its inner step completes: cancel until the task is done.
            while task is not None and not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=0.1)
        self._fail_all(RuntimeError("The server is shutting down."))
        await self._connection.disconnect()
        await self._reader.aclose()

    def queue_wake(self, pipe: Any) -> None:
        """Add to ``pipe`` the wake-up a watch that joined needs (none if no read is out).

        The read that is out names only the streams followed when it was sent: the XADD
        to the wake stream ends it, and the next one names the new watch's stream too.
        """
        if not (self._blocked and not self._nudged):
            return
        self._nudged = True
        pipe.xadd(self._wake_key, {"w": "1"}, maxlen=16, approximate=True)
        if time.monotonic() >= self._wake_renewed + _WAKE_RENEW_SECONDS:
            self._wake_renewed = time.monotonic()
            pipe.expire(self._wake_key, _WAKE_TTL_SECONDS)

    async def _nudge(self) -> None:
        try:
            # One command: the wake stream's lifetime is renewed only now and then.
            if time.monotonic() < self._wake_renewed + _WAKE_RENEW_SECONDS:
                await self._nudger.xadd(self._wake_key, {"w": "1"}, maxlen=16, approximate=True)
                return
            self._wake_renewed = time.monotonic()
            async with self._nudger.pipeline(transaction=False) as pipe:
                pipe.xadd(self._wake_key, {"w": "1"}, maxlen=16, approximate=True)
                pipe.expire(self._wake_key, _WAKE_TTL_SECONDS)
                await pipe.execute()
        except Exception:  # the read ends within _BLOCK_MS anyway
            logger.warning("Could not wake the stream reader.", exc_info=True)

    async def _read_loop(self) -> None:
        while True:
            starts = {self._wake_key: self._wake_last}
            for key, followers in self._watches.items():
                starts[key] = min(followers, key=_at).last_id
            asked_more, self._more = self._more, set()
            # A stream cut at the count is read on at once: whether its end was reached
            # decides whether a pause ends a follow.
            block = None if asked_more else self._block_ms
            self._nudged = False
            self._blocked = block is not None
            try:
                reply = await self._exchange(starts, block)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # Redis gone past the client's retries
                self._blocked = False
                if not self._failing:
                    self._failing = True
                    logger.warning("Live stream reader: Redis unavailable (%s: %s); its followers "
                                   "were told, it reads again from where each stands",
                                   type(error).__name__, error)
                self._fail_all(error)
                await asyncio.sleep(_RETRY_SECONDS)
                continue
            self._blocked = False
            self._failing = False
            self._hand_out(_by_stream(reply), starts, asked_more)

    async def _exchange(self, starts: dict[str, str], block: int | None) -> Any:
        """One XREAD on the reader's connection, retried (and reconnected) as the client's are.

        The events of the watches waiting for them are read in the same write, before it.
        """
        xread: list[Any] = ["XREAD", "COUNT", self._read_count]
        if block is not None:
            xread += ["BLOCK", block]
        xread += ["STREAMS", *starts, *starts.values()]
        connection = self._connection
        timeout = (block or 0) / 1000 + _READ_MARGIN_SECONDS

        async def read() -> Any:
            wanted = list(self._events_wanted)
            commands = [("XRANGE", watch.events_key, "-", "+") for watch in wanted]
            await connection.send_packed_command(connection.pack_commands([*commands, xread]))
            for watch in wanted:
                try:
                    entries = await connection.read_response(timeout=_READ_MARGIN_SECONDS)
                except ResponseError:  # the watch reads them again the usual way, and says why
                    watch.take_events(None)
                else:
                    watch.take_events(_events_in(entries))
                del self._events_wanted[watch]
            return await connection.read_response(timeout=timeout)

        async def reconnect(_: Exception) -> None:
            await connection.disconnect()

        return await connection.retry.call_with_retry(read, reconnect)

    def _hand_out(self, read: dict[str, list[tuple[str, dict[str, str]]]],
                  starts: dict[str, str], asked_more: set[str]) -> None:
        for key, entries in read.items():
            if key == self._wake_key:
                self._wake_last = entries[-1][0]
                continue
            at_end = len(entries) < self._read_count
            if not at_end:
                self._more.add(key)
            items = [item for entry_id, fields in entries
                     if (item := LiveItem.parse(entry_id, fields)) is not None]
            self._deliver(key, starts[key], items, entries[-1][0], at_end)
        for key in asked_more - read.keys():  # read on without blocking: nothing more
            if key in starts:
                self._deliver(key, starts[key], [], None, True)

    def _deliver(self, key: str, start: str, items: list[LiveItem], last_id: str | None,
                 at_end: bool) -> None:
        begin = position_of(start)
        last = None if last_id is None else position_of(last_id)
        for watch in list(self._watches.get(key, ())):
            # A watch that joined behind this read's start is served by the next read.
            if watch.position >= begin and watch.deliver(items, last_id, last, at_end):
                self._events_wanted[watch] = None

    def _fail_all(self, error: BaseException) -> None:
        for followers in self._watches.values():
            for watch in followers:
                watch.fail(error)


def _fields(fields: Any) -> dict[str, str]:
    """An entry's fields as Redis sends them (a flat list of names and values) as a dict."""
    return fields if isinstance(fields, dict) else dict(zip(fields[::2], fields[1::2], strict=True))


def _events_in(entries: Any) -> list[LiveItem]:
    """The event entries of an XRANGE reply."""
    return [item for entry_id, fields in entries or ()
            if (item := LiveItem.parse(entry_id, _fields(fields))) is not None and item.kind == "event"]


def _by_stream(reply: Any) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """An XREAD reply (RESP2 list or RESP3 map) as entries by stream key."""
    if not reply:
        return {}
    pairs = reply.items() if isinstance(reply, dict) else reply
    read: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for key, entries in pairs:
        if entries and isinstance(entries[0], list) and entries[0] and isinstance(entries[0][0], list):
            entries = entries[0]  # RESP3 wraps the entries once more
        if entries:
            # As Redis sends them: each entry's fields a flat list of names and values.
            read[key] = [(entry_id, _fields(fields)) for entry_id, fields in entries]
    return read
