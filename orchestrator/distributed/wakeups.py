"""Wake-ups: how new work for a session reaches an orchestrator, through one Redis Stream.

Whoever queues work for a session (a new message, a worker's result, an answer from outside,
a cancel) pushes the item on the session's queue and, in the same round trip, adds a wake-up
entry ``{app, user, session, inv}`` (``inv``: the item's invocation) to the wake stream of the
invocations queue. Every orchestrator reads that stream through one consumer group, so each
entry reaches one orchestrator, which drains the session (see
:meth:`InvocationService.drain`).

What holds:

- An entry is acknowledged (and deleted) only after its drain ended. An orchestrator that
  dies leaves its entries pending; another one claims them (``XAUTOCLAIM``) once they have
  been idle for ``reclaim_idle_seconds`` (the session lease's time to live, so the dead
  holder's lease has expired by then) and drains the session, recovering what was left.
- A drain that finds the session's lease held by another orchestrator keeps its entry and
  retries after ``retry_seconds`` (doubling up to a cap): the holder normally takes the new
  item itself before letting go, and the retry covers a holder that died.
- Entries are never trimmed: the stream holds only entries not yet acknowledged.

This replaces a Celery task per wake-up: reading a stream in the orchestrator's own event
loop costs a fraction of a Celery task's consume, ack and task events, and a batch of
wake-ups arrives in one read.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator.distributed.stores import SessionKey
from orchestrator.errors import is_infrastructure_error

logger = logging.getLogger(__name__)

GROUP = "orchestrators"
"""The consumer group every orchestrator reads the wake stream through."""

_BLOCK_MS = 1000
"""Longest single blocking read (kept under redis-py's socket timeouts)."""

_TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError)
"""Errors a reading loop waits out (Redis restarting, a dropped connection)."""

DrainHandler = Callable[[SessionKey, str | None], Awaitable[bool]]
"""``await drain(key, hint)``: True once the session was drained, False if its lease was
busy; ``hint`` is the invocation the wake-up announced, if it named one."""


class RedisWakeups:
    """The wake stream of one invocations queue: post entries, or consume them."""

    def __init__(self, client: aioredis.Redis, stream_key: str, *, group: str = GROUP) -> None:
        self._redis = client
        self.stream_key = stream_key
        self._group = group

    async def post(self, key: SessionKey, invocation_id: str = "") -> None:
        """Ask an orchestrator to drain ``key``, with no item pushed along.

        ``invocation_id`` names the invocation expected first: the orchestrator reads it in
        the round trip that takes the session. (Pushes post their wake-up in their own script:
        ``RedisSessionQueue``'s ``_PUSH``, with the same fields.)
        """
        fields = {"app": key[0], "user": key[1], "session": key[2]}
        if invocation_id:
            fields["inv"] = invocation_id
        await self._redis.xadd(self.stream_key, fields)  # type: ignore[arg-type]

    async def pending(self) -> int:
        """Entries delivered to an orchestrator and not yet acknowledged."""
        try:
            info = await self._redis.xpending(self.stream_key, self._group)
        except ResponseError:  # no stream or no group yet
            return 0
        return int(info["pending"])

    async def ensure_group(self) -> None:
        """Create the consumer group (from the stream's start: earlier entries count too)."""
        try:
            await self._redis.xgroup_create(self.stream_key, self._group, id="0", mkstream=True)
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


class WakeConsumer:
    """Reads wake-ups, drains their sessions concurrently, acknowledges what was drained."""

    def __init__(
        self,
        wakeups: RedisWakeups,
        drain: DrainHandler,
        *,
        concurrency: int,
        retry_seconds: float,
        reclaim_idle_seconds: float,
        name: str,
    ) -> None:
        self._wakeups = wakeups
        self._redis = wakeups._redis
        self._drain = drain
        self._limit = max(1, concurrency)
        self._retry = max(0.01, retry_seconds)
        self._retry_cap = max(self._retry, reclaim_idle_seconds / 2)
        self._reclaim_idle_ms = max(1, int(reclaim_idle_seconds * 1000))
        self.name = name
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._room = asyncio.Event()
        self._room.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def start(self) -> None:
        """Start reading (on the running loop)."""
        self._tasks = [asyncio.ensure_future(self._read_loop()),
                       asyncio.ensure_future(self._reclaim_loop())]

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop reading; give drains in progress ``timeout`` seconds, then cancel them.

        Entries whose drain did not finish stay pending: another orchestrator claims them.
        """
        self._stopping = True  # the loops check it too: a cancel can be swallowed (below)
        for task in self._tasks:
            # Python 3.11's wait_for (redis-py sends each command through it) can drop a
            # cancellation that lands as the command completes: cancel until they are done.
            while not task.done():
                task.cancel()
                await asyncio.wait([task], timeout=0.1)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        running = list(self._in_flight.values())
        if running:
            _, late = await asyncio.wait(running, timeout=timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def _read_loop(self) -> None:
        await self._wakeups.ensure_group()
        stream = self._wakeups.stream_key
        while not self._stopping:
            await self._room.wait()
            try:
                reply = await self._redis.xreadgroup(
                    self._wakeups._group, self.name, {stream: ">"},
                    count=self._limit - len(self._in_flight), block=_BLOCK_MS,
                )
            except ResponseError as error:
                if "NOGROUP" not in str(error):
                    raise
                await self._wakeups.ensure_group()  # the stream was deleted (FLUSHDB)
                continue
            except _TRANSIENT as error:
                logger.warning("Reading wake-ups failed (%s); retrying", error)
                await asyncio.sleep(self._retry)
                continue
            for _, entries in reply or []:
                for entry_id, fields in entries:
                    self._spawn(entry_id, fields)

    async def _reclaim_loop(self) -> None:
        """Take over entries another orchestrator left pending (it died) once idle enough."""
        interval = min(self._reclaim_idle_ms / 2000, 5.0)
        while not self._stopping:
            await asyncio.sleep(interval)
            try:
                reply = await self._redis.xautoclaim(
                    self._wakeups.stream_key, self._wakeups._group, self.name,
                    min_idle_time=self._reclaim_idle_ms, start_id="0-0", count=100,
                )
            except ResponseError as error:
                if "NOGROUP" in str(error):
                    continue
                raise
            except _TRANSIENT as error:
                logger.warning("Reclaiming wake-ups failed (%s); retrying", error)
                continue
            for entry_id, fields in reply[1]:
                if entry_id not in self._in_flight and fields:
                    logger.info("Reclaimed wake-up %s for %s", entry_id, fields)
                    self._spawn(entry_id, fields)

    def _spawn(self, entry_id: str, fields: dict[str, str]) -> None:
        task = asyncio.ensure_future(self._handle(entry_id, fields))
        self._in_flight[entry_id] = task
        if len(self._in_flight) >= self._limit:
            self._room.clear()
        task.add_done_callback(lambda _: self._done(entry_id))

    def _done(self, entry_id: str) -> None:
        self._in_flight.pop(entry_id, None)
        self._room.set()

    async def _handle(self, entry_id: str, fields: dict[str, str]) -> None:
        key = (fields.get("app", ""), fields.get("user", ""), fields.get("session", ""))
        if all(key):
            if not await self._drain_until_done(key, fields.get("inv")):
                return  # left pending: claimed again once idle, by this or another orchestrator
        else:
            logger.error("Malformed wake-up %s dropped: %s", entry_id, fields)
        await self._acknowledge(entry_id)

    async def _drain_until_done(self, key: SessionKey, hint: str | None) -> bool:
        """Drain ``key``, waiting out a busy lease and infrastructure errors; False on a bug.

        After an infrastructure error (Redis away, the lease lost) the item that was being
        worked on stays claimed and the next drain takes it up again from the log, after a
        delay that doubles up to the reclaim delay.
        """
        delay = failure_delay = self._retry
        while True:
            try:
                if await self._drain(key, hint):
                    return True
                # Another orchestrator holds the session: it most likely takes the new item
                # before letting go; retrying covers a holder that died.
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._retry_cap)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if not is_infrastructure_error(error):
                    logger.exception("Draining session %s failed", key)
                    return False
                logger.warning("Draining session %s hit %s: %s; retrying in %.1f s",
                               key, type(error).__name__, error, failure_delay)
                await asyncio.sleep(failure_delay)
                failure_delay = min(failure_delay * 2, self._retry_cap)

    async def _acknowledge(self, entry_id: str) -> None:
        """Acknowledge and delete a handled entry, waiting out a Redis that is away."""
        delay = self._retry
        while True:
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.xack(self._wakeups.stream_key, self._wakeups._group, entry_id)
                    pipe.xdel(self._wakeups.stream_key, entry_id)
                    await pipe.execute()
                return
            except _TRANSIENT as error:
                logger.warning("Acknowledging wake-up %s failed (%s); retrying", entry_id, error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._retry_cap)
