"""Wake-ups on real Redis: each reaches one orchestrator, survives its death, waits out a busy lease."""

from __future__ import annotations

import asyncio

from orchestrator.distributed.wakeups import GROUP, RedisWakeups

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
    from orchestrator import redis_keys
    from orchestrator.distributed.models import ToolResult, WorkItem
    from orchestrator.distributed.redis_queue import RedisSessionQueue
    from orchestrator.distributed.redis_stores import RedisInvocationStore

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
