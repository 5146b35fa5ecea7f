"""Wake-ups on real Redis: each reaches one orchestrator, survives its death, waits out a busy
lease, and a flood of them on one session holds one slot and holds back no other session."""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator.backends.redis.wakeups import GROUP, RedisWakeups

STREAM = "adk:wake:{test}"
KEY = ("chat", "u", "s-1")


async def _until(condition, what: str, timeout: float = 10.0) -> None:
    """Wait for an asyncio condition set by the code under test (no fixed sleeps)."""
    try:
        await asyncio.wait_for(condition.wait(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_a_wake_up_is_drained_once_then_acknowledged_and_deleted(redis_client):
    wakeups = RedisWakeups(redis_client, STREAM)
    drained: list[tuple] = []
    done = asyncio.Event()

    async def drain(key, hint):
        drained.append((key, hint))
        done.set()
        return True

    consumer = wakeups.consumer(drain, reclaim_idle_seconds=30)
    await wakeups.ensure_group()
    consumer.start()
    try:
        await wakeups.post(KEY, "e-1")
        await _until(done, "the drain")
    finally:
        await consumer.stop()
    assert drained == [(KEY, "e-1")]
    assert await wakeups.pending() == 0
    assert await redis_client.xlen(STREAM) == 0  # acknowledged entries are deleted


async def test_a_wake_up_left_by_a_dead_orchestrator_is_claimed_by_another(redis_client):
    wakeups = RedisWakeups(redis_client, STREAM)
    await wakeups.ensure_group()
    await wakeups.post(KEY, "e-2")
    # An orchestrator reads the entry, then dies before draining the session.
    read = await redis_client.xreadgroup(GROUP, "dead-orchestrator", {STREAM: ">"}, count=10)
    assert len(read[0][1]) == 1
    assert await wakeups.pending() == 1

    drained = asyncio.Event()

    async def drain(key, hint):
        assert (key, hint) == (KEY, "e-2")
        drained.set()
        return True

    survivor = wakeups.consumer(drain, reclaim_idle_seconds=0.2, name="survivor")
    survivor.start()
    try:
        await _until(drained, "the survivor to claim the dead orchestrator's wake-up")
    finally:
        await survivor.stop()
    assert await wakeups.pending() == 0


async def test_a_busy_session_is_retried_until_its_holder_lets_go(redis_client):
    wakeups = RedisWakeups(redis_client, STREAM)
    attempts = 0
    drained = asyncio.Event()

    async def drain(key, hint):
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            return False  # another orchestrator holds the lease
        drained.set()
        return True

    consumer = wakeups.consumer(drain, retry_seconds=0.01, reclaim_idle_seconds=30)
    await wakeups.ensure_group()
    consumer.start()
    try:
        await wakeups.post(KEY)
        await _until(drained, "the third attempt")
        assert await wakeups.pending() in (0, 1)  # acknowledged right after the drain
    finally:
        await consumer.stop()
    assert attempts == 3
    assert await wakeups.pending() == 0


async def test_a_failing_drain_leaves_its_wake_up_pending(redis_client):
    wakeups = RedisWakeups(redis_client, STREAM)
    failed = asyncio.Event()

    async def drain(key, hint):
        failed.set()
        raise RuntimeError("Redis went away mid-drain")

    consumer = wakeups.consumer(drain, reclaim_idle_seconds=30)
    await wakeups.ensure_group()
    consumer.start()
    try:
        await wakeups.post(KEY)
        await _until(failed, "the failing drain")
    finally:
        await consumer.stop()
    assert await wakeups.pending() == 1  # claimed again later, by this or another orchestrator


async def test_a_result_is_stored_its_resume_queued_and_announced_once(redis_client):
    from orchestrator.backends.redis import keys as redis_keys
    from orchestrator.backends.redis.invocation_store import RedisInvocationStore
    from orchestrator.backends.redis.session_queue import RedisSessionQueue
    from orchestrator.distributed.models import ToolResult, WorkItem

    wakeups = RedisWakeups(redis_client, STREAM)
    queue = RedisSessionQueue(redis_client, wakeups=wakeups)
    store = RedisInvocationStore(redis_client)
    resume = WorkItem(kind="resume", invocation_id="e-3")
    first = ToolResult(function_call_id="c-1", tool_name="t", response={"v": 1})
    again = first.model_copy(update={"response": {"v": 2}})  # a redelivered job's copy

    assert await queue.push(KEY, resume, result=first) is True
    assert await queue.push(KEY, resume, result=again) is False
    assert (await store.results("chat", "e-3"))["c-1"].response == {"v": 1}  # first one wins
    assert await redis_client.lrange(redis_keys.session_queue(*KEY), 0, -1) == [
        resume.model_dump_json()]  # one resume, announced once
    entries = await redis_client.xrange(STREAM)
    assert [fields for _, fields in entries] == [
        {"app": "chat", "user": "u", "session": "s-1", "inv": "e-3"}]


# ---- fair sharing: a session holds at most one slot ------------------------------------------

FLOODED = ("chat", "u", "s-flooded")
OTHER = ("chat", "u", "s-other")


async def _eventually(check, what: str, timeout: float = 10.0) -> None:
    """Poll an async condition on Redis until it holds (with a deadline)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class _Sessions:
    """A drain handler that behaves like sessions with leases: one drain per session at once.

    Drains of ``FLOODED`` wait for ``release``; every other session drains at once.
    """

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.drained: dict[tuple, asyncio.Event] = {}
        self.calls: list[tuple] = []
        self._held: set[tuple] = set()

    def done(self, key) -> asyncio.Event:
        return self.drained.setdefault(key, asyncio.Event())

    async def drain(self, key, hint) -> bool:
        if key in self._held:
            return False  # the lease is busy
        self._held.add(key)
        self.calls.append(key)
        try:
            if key == FLOODED:
                await self.release.wait()
        finally:
            self._held.discard(key)
        self.done(key).set()
        return True


async def test_a_flood_on_one_session_does_not_hold_back_other_sessions(redis_client):
    wakeups = RedisWakeups(redis_client, STREAM)
    sessions = _Sessions()
    consumer = wakeups.consumer(sessions.drain, concurrency=4, retry_seconds=0.01,
                                reclaim_idle_seconds=30)
    await wakeups.ensure_group()
    for n in range(50):
        await wakeups.post(FLOODED, f"e-{n}")
    await wakeups.post(OTHER, "e-other")
    consumer.start()
    try:
        # The other session is drained while the flooded one's first drain still runs.
        await _until(sessions.done(OTHER), "the other session's drain")
        assert not sessions.release.is_set() and sessions.calls.count(FLOODED) == 1
        # The flood costs two pending entries: the running drain's and one parked on it.
        await _eventually(lambda: _pending_is(wakeups, 2), "the superseded wake-ups' acks")
        sessions.release.set()
        await _eventually(lambda: _pending_is(wakeups, 0), "every wake-up answered")
    finally:
        await consumer.stop()
    # The parked wake-up got one more drain (its item may have come as the first let go).
    assert sessions.calls.count(FLOODED) == 2
    assert await redis_client.xlen(STREAM) == 0


async def test_waiting_out_a_busy_lease_holds_no_slot(redis_client):
    wakeups = RedisWakeups(redis_client, STREAM)
    sessions = _Sessions()
    free = asyncio.Event()
    attempts = 0

    async def drain(key, hint):
        nonlocal attempts
        if key == FLOODED and not free.is_set():
            attempts += 1
            return False  # held by another orchestrator
        return await sessions.drain(key, hint)

    sessions.release.set()
    consumer = wakeups.consumer(drain, concurrency=1, retry_seconds=0.05, reclaim_idle_seconds=30)
    await wakeups.ensure_group()
    await wakeups.post(FLOODED, "e-busy")
    await wakeups.post(OTHER, "e-other")
    consumer.start()
    try:
        await _until(sessions.done(OTHER), "the other session, with the only slot free")
        assert attempts >= 1 and not sessions.done(FLOODED).is_set()
        free.set()
        await _until(sessions.done(FLOODED), "the busy session, once its holder let go")
        await _eventually(lambda: _pending_is(wakeups, 0), "both wake-ups answered")
    finally:
        await consumer.stop()


async def test_a_parked_wake_up_outlives_the_orchestrator_that_parked_it(redis_client):
    wakeups = RedisWakeups(redis_client, STREAM)
    stuck = _Sessions()  # the first orchestrator's drain of the flooded session never ends
    first = wakeups.consumer(stuck.drain, reclaim_idle_seconds=30, name="first")
    await wakeups.ensure_group()
    for n in range(20):
        await wakeups.post(FLOODED, f"e-{n}")
    first.start()
    try:
        await _eventually(lambda: _pending_is(wakeups, 2), "the superseded wake-ups' acks")
    finally:
        await _die(first)  # mid-drain: both of its entries stay pending
    assert await wakeups.pending() == 2

    survivor_sessions = _Sessions()
    survivor_sessions.release.set()
    survivor = wakeups.consumer(survivor_sessions.drain, reclaim_idle_seconds=0.2,
                                name="survivor")
    survivor.start()
    try:
        await _until(survivor_sessions.done(FLOODED), "the survivor to drain the session")
        await _eventually(lambda: _pending_is(wakeups, 0), "both entries answered")
    finally:
        await survivor.stop()


async def _die(consumer: Any) -> None:
    """Stop a consumer as a killed process would: no hand-over of what it was draining."""
    tasks = [*consumer._tasks, *consumer._running]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_graceful_stop_hands_an_unfinished_drain_over_at_once(redis_client):
    wakeups = RedisWakeups(redis_client, STREAM)
    stuck = _Sessions()  # the first orchestrator's drain never ends before its stop
    first = wakeups.consumer(stuck.drain, reclaim_idle_seconds=30, name="first")
    await wakeups.ensure_group()
    await wakeups.post(FLOODED, "e-1")
    first.start()
    await _eventually(lambda: _pending_is(wakeups, 1), "the wake-up read")
    await first.stop(timeout=0)
    assert await wakeups.pending() == 0  # its entry acknowledged, a new one posted

    survivor_sessions = _Sessions()
    survivor_sessions.release.set()
    survivor = wakeups.consumer(survivor_sessions.drain, reclaim_idle_seconds=30,
                                name="survivor")
    survivor.start()
    try:  # long before the 30 s after which a dead holder's entries are claimed
        await _until(survivor_sessions.done(FLOODED), "the survivor to drain the session")
    finally:
        await survivor.stop()


async def _pending_is(wakeups: RedisWakeups, count: int) -> bool:
    return await wakeups.pending() == count
