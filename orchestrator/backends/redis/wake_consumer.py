"""WakeConsumer: an orchestrator's reading side of the wake stream (:mod:`.wakeups`).

It reads the wake-up entries through the stream's consumer group, drains their sessions
concurrently (see :meth:`InvocationService.drain`) and acknowledges what was drained.

What holds:

- One drain per session per orchestrator, and a session holds at most one of its
  ``concurrency`` slots: a slot is held only while a drain runs. A wake-up for a session this
  orchestrator is already draining (or waiting to drain) takes no slot: the first such one is
  parked and answered by one more drain once the current one ended (so an item pushed while
  that drain was letting go is not missed); later ones are acknowledged at once, since the
  parked entry, still pending, stands for them (the work itself waits in the session's queue).
  A flood of wake-ups for one session thus costs a slot and two pending entries, and the
  entries of other sessions behind it in the stream are read at once.
- An entry is acknowledged (and deleted) only after a drain that began after it was read has
  ended, or once a pending entry of the same session stands for it. An orchestrator that dies
  leaves its entries pending; another one claims them (``XAUTOCLAIM``) once they have been
  idle for ``reclaim_idle_seconds`` (the session lease's time to live, so the dead holder's
  lease has expired by then) and drains the session, recovering what was left.
- Entries pending on this orchestrator that no drain of it follows (delivered by a read or a
  claim whose reply was lost, the command then sent again: :mod:`.wakeup_pending`) are taken
  in within about a second: the reading loop looks at its own pending list every
  :data:`~.wakeup_pending.LOOK_SECONDS` and after a failed read, between two reads.
- A drain that finds the session's lease held by another orchestrator keeps its entry and
  retries after ``retry_seconds`` (doubling up to a cap): the holder normally takes the new
  item itself before letting go, and the retry covers a holder that died. The wait holds no
  slot, nor does the wait after an infrastructure error; at most ``concurrency`` times
  :data:`_FOLLOWED_PER_SLOT` sessions are followed at once (reading pauses beyond that).
- Entries are never trimmed: the stream holds only entries not yet acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator.backends.redis.wakeup_pending import LOOK_SECONDS, claim_unfollowed
from orchestrator.distributed.stores import SessionKey
from orchestrator.distributed.wakeups import DrainHandler
from orchestrator.errors import is_infrastructure_error

if TYPE_CHECKING:
    from orchestrator.backends.redis.wakeups import RedisWakeups

logger = logging.getLogger(__name__)

_BLOCK_MS = 1000
"""Longest single blocking read (kept under redis-py's socket timeouts)."""

_TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError)
"""Errors a reading loop waits out (Redis restarting, a dropped connection)."""

_FOLLOWED_PER_SLOT = 4
"""Sessions followed at once per slot (draining, or waiting out a busy lease or an error):
bounds what one orchestrator takes on when many sessions are busy elsewhere."""


@dataclass
class _Followed:
    """A session this orchestrator drains, and the wake-ups that drain answers for."""

    hint: str | None
    """The invocation the next drain reads along with taking the session."""
    entries: list[str]
    """Wake-ups the drain running now answers for: acknowledged once it ended."""
    parked: str | None = None
    """The first wake-up read since that drain began: answered by one more drain."""
    parked_hint: str | None = None


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
        self._redis = wakeups.client
        self._drain = drain
        self._limit = max(1, concurrency)
        self._retry = max(0.01, retry_seconds)
        self._retry_cap = max(self._retry, reclaim_idle_seconds / 2)
        self._reclaim_idle_ms = max(1, int(reclaim_idle_seconds * 1000))
        self.name = name
        self._slots = asyncio.Semaphore(self._limit)
        """Held while a drain runs: at most ``concurrency`` at once."""
        self._followed: dict[SessionKey, _Followed] = {}
        self._resting = 0
        """Followed sessions waiting between two attempts (they hold no slot)."""
        self._max_followed = self._limit * _FOLLOWED_PER_SLOT
        self._running: set[asyncio.Task[None]] = set()
        self._room = asyncio.Event()
        self._room.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._next_look = 0.0
        """Loop time of the next look at this consumer's own pending list (0: at once)."""
        self._given_up: set[str] = set()
        """Entries a drain left pending after a bug: taken up by the reclaim, not the look."""

    def start(self) -> None:
        """Start reading (on the running loop)."""
        self._tasks = [asyncio.ensure_future(self._read_loop()),
                       asyncio.ensure_future(self._reclaim_loop())]

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop reading; give drains in progress ``timeout`` seconds, then cancel them.

        The sessions whose drain did not finish (or that waited between two attempts) are
        handed over: a new wake-up for each, then their entries acknowledged, so that another
        orchestrator takes them at once rather than once the entries have been idle for a
        lease's time to live. (A cancelled drain lets its lease go; its item, still claimed,
        goes back to the queue's head when the next holder takes the session.) An entry that
        could not be handed over stays pending and is claimed as a dead holder's would be.
        """
        self._stopping = True  # the loops check it too: a cancel can be swallowed (below)
        for task in self._tasks:
            # Python 3.11's wait_for (redis-py sends each command through it) can drop a
            # cancellation that lands as the command completes: cancel until they are done.
            while not task.done():
                task.cancel()
                await asyncio.wait([task], timeout=0.1)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        running = list(self._running)
        if running:
            _, late = await asyncio.wait(running, timeout=timeout)
            unfinished = {key: (followed.hint, [*followed.entries, *filter(None, [followed.parked])])
                          for key, followed in self._followed.items()}
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
            await self._hand_over(unfinished)

    async def _hand_over(self, sessions: dict[SessionKey, tuple[str | None, list[str]]]) -> None:
        """Post a new wake-up for each session, then acknowledge its entries (see ``stop``)."""
        for key, (hint, entry_ids) in sessions.items():
            try:
                await self._wakeups.post(key, hint or "")
                if entry_ids:
                    await self._ack_once(entry_ids)
            except _TRANSIENT as error:
                logger.warning("Handing session %r over at stop failed (%s); another "
                               "orchestrator claims it once its wake-up is idle", key, error)

    def _room_left(self) -> int:
        """Entries to read now: one per free slot, within the bound on followed sessions."""
        claiming = len(self._followed) - self._resting
        return min(self._limit - claiming, self._max_followed - len(self._followed))

    def _update_room(self) -> None:
        if self._room_left() > 0:
            self._room.set()
        else:
            self._room.clear()

    async def _read_loop(self) -> None:
        await self._wakeups.ensure_group()
        stream = self._wakeups.stream_key
        loop = asyncio.get_running_loop()
        while not self._stopping:
            await self._room.wait()
            if loop.time() >= self._next_look:
                await self._look_at_own_pending()
                self._next_look = loop.time() + LOOK_SECONDS
                continue  # what it took in may have used the room up
            try:
                reply = await self._redis.xreadgroup(
                    self._wakeups.group, self.name, {stream: ">"},
                    count=max(1, self._room_left()), block=_BLOCK_MS,
                )
            except ResponseError as error:
                if "NOGROUP" not in str(error):
                    raise
                await self._wakeups.ensure_group()  # the stream was deleted (FLUSHDB)
                continue
            except _TRANSIENT as error:
                logger.warning("Reading wake-ups failed (%s); retrying", error)
                self._next_look = 0.0  # that read may have been delivered: look next time
                await asyncio.sleep(self._retry)
                continue
            await self._take_in([entry for _, entries in reply or [] for entry in entries])

    async def _look_at_own_pending(self) -> None:
        """Take in the entries pending on this consumer that no drain of it follows."""
        try:
            found = await claim_unfollowed(
                self._redis, self._wakeups.stream_key, self._wakeups.group, self.name,
                self._followed_entries, self._given_up)
        except ResponseError as error:
            if "NOGROUP" in str(error):
                return  # the read that follows creates it again
            raise
        except _TRANSIENT as error:
            logger.warning("Looking at this consumer's pending wake-ups failed (%s)", error)
            return
        if found:
            logger.warning("Taking in %d wake-up(s) pending on this consumer and followed by "
                           "none of its drains (a reply lost, or a process of the same name "
                           "before)", len(found))
            await self._take_in(found)

    def _followed_entries(self) -> set[str]:
        """The ids of the entries this consumer's drains answer for."""
        ids: set[str] = set()
        for followed in self._followed.values():
            ids.update(followed.entries)
            if followed.parked is not None:
                ids.add(followed.parked)
        return ids

    async def _reclaim_loop(self) -> None:
        """Take over entries another orchestrator left pending (it died) once idle enough."""
        interval = min(self._reclaim_idle_ms / 2000, 5.0)
        while not self._stopping:
            await asyncio.sleep(interval)
            try:
                reply = await self._redis.xautoclaim(
                    self._wakeups.stream_key, self._wakeups.group, self.name,
                    min_idle_time=self._reclaim_idle_ms, start_id="0-0", count=100,
                )
            except ResponseError as error:
                if "NOGROUP" in str(error):
                    continue
                raise
            except _TRANSIENT as error:
                logger.warning("Reclaiming wake-ups failed (%s); retrying", error)
                continue
            claimed = [(entry_id, fields) for entry_id, fields in reply[1] if fields]
            for entry_id, fields in claimed:
                logger.info("Reclaimed wake-up %r for session %r", entry_id, fields.get("session"))
            await self._take_in(claimed)

    async def _take_in(self, entries: list[tuple[str, dict[str, str]]]) -> None:
        """Follow the sessions of newly read entries; acknowledge the superseded at once."""
        superseded = [entry_id for entry_id, fields in entries if not self._follow(entry_id, fields)]
        if superseded:
            await self._acknowledge(superseded)

    def _follow(self, entry_id: str, fields: dict[str, str]) -> bool:
        """Start draining the entry's session, or park the entry on its drain.

        False when the entry is answered already: malformed, or superseded by the entry
        parked on its session's drain.
        """
        key = (fields.get("app", ""), fields.get("user", ""), fields.get("session", ""))
        if not all(key):
            logger.error("Malformed wake-up %r dropped", entry_id)
            return False
        hint = fields.get("inv")
        followed = self._followed.get(key)
        if followed is None:
            followed = self._followed[key] = _Followed(hint, [entry_id])
            task = asyncio.ensure_future(self._drain_session(key, followed))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
            self._update_room()
            return True
        if entry_id == followed.parked or entry_id in followed.entries:
            return True  # one of ours, reclaimed while its drain runs long: still followed
        if followed.parked is None:
            followed.parked, followed.parked_hint = entry_id, hint
            return True
        return False

    async def _drain_session(self, key: SessionKey, followed: _Followed) -> None:
        """Drain ``key`` until every wake-up read for it is answered, then stop following it."""
        try:
            while await self._drain_until_done(key, followed.hint):
                await self._acknowledge(followed.entries)
                if followed.parked is None:
                    return  # no await from here to forgetting the session: nothing slips in
                # Wake-ups read during that drain: their items may have come after its last
                # look at the queue (as it let go), so one more drain answers them.
                followed.entries, followed.hint = [followed.parked], followed.parked_hint
                followed.parked = followed.parked_hint = None
            # A bug: the entries stay pending, claimed again once idle, by this or another
            # orchestrator (not at once by the look at this consumer's pending list).
            self._given_up.update(followed.entries)
            if followed.parked is not None:
                self._given_up.add(followed.parked)
        finally:
            if self._followed.get(key) is followed:
                del self._followed[key]
            self._update_room()

    async def _drain_until_done(self, key: SessionKey, hint: str | None) -> bool:
        """Drain ``key``, waiting out a busy lease and infrastructure errors; False on a bug.

        Only the drain itself holds a slot; the waits between attempts do not. After an
        infrastructure error (Redis away, the lease lost) the item that was being worked on
        stays claimed and the next drain takes it up again from the log, after a delay that
        doubles up to the reclaim delay.
        """
        delay = failure_delay = self._retry
        while True:
            try:
                async with self._slots:
                    drained = await self._drain(key, hint)
                if drained:
                    return True
                # Another orchestrator holds the session: it most likely takes the new item
                # before letting go; retrying covers a holder that died.
                await self._rest(delay)
                delay = min(delay * 2, self._retry_cap)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if not is_infrastructure_error(error):
                    logger.exception("Draining session %r failed", key)
                    return False
                logger.warning("Draining session %r hit %s: %s; retrying in %.1f s",
                               key, type(error).__name__, error, failure_delay)
                await self._rest(failure_delay)
                failure_delay = min(failure_delay * 2, self._retry_cap)

    async def _rest(self, seconds: float) -> None:
        """Wait between two attempts on a session, holding no slot."""
        self._resting += 1
        self._update_room()
        try:
            await asyncio.sleep(seconds)
        finally:
            self._resting -= 1
            self._update_room()

    async def _ack_once(self, entry_ids: list[str]) -> None:
        """Acknowledge and delete entries in one round trip (Redis errors are raised)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.xack(self._wakeups.stream_key, self._wakeups.group, *entry_ids)
            pipe.xdel(self._wakeups.stream_key, *entry_ids)
            await pipe.execute()

    async def _acknowledge(self, entry_ids: list[str]) -> None:
        """Acknowledge and delete handled entries, waiting out a Redis that is away."""
        delay = self._retry
        while True:
            try:
                await self._ack_once(entry_ids)
                return
            except _TRANSIENT as error:
                logger.warning("Acknowledging %d wake-up(s) failed (%s); retrying",
                               len(entry_ids), error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._retry_cap)
