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


def test_an_enqueue_creates_the_session_records_and_queues_in_one_go(redis_url):
    import redis as sync_redis

    from config import Settings
    from orchestrator import redis_keys
    from workers.runtime import Runtime

    runtime = Runtime(Settings(redis_url=redis_url), load_apps=False)
    check = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    check.flushdb()
    try:
        check.script_flush()  # a Redis that restarted: the scripts are loaded on the way
        request = {"app_name": "chat", "user_id": "u", "new_message": "hi", "invocation_id": "e-9"}
        record, key = runtime.run(runtime.submit_invocation(request))
        assert record.status.value == "queued" and key == ("chat", "u", record.session_id)
        assert check.exists(redis_keys.session(*key)) == 1  # the new session exists
        again, _ = runtime.run(runtime.submit_invocation({**request, "session_id": key[2]}))
        assert again.model_dump() == record.model_dump()  # the same invocation, not a second
        assert check.llen(redis_keys.session_queue(*key)) == 1
        wake = redis_keys.wake_stream(runtime.settings.invocations_queue)
        assert [fields["inv"] for _, fields in check.xrange(wake)] == ["e-9"]
    finally:
        check.close()
        runtime.close()


def test_the_client_enqueues_from_its_own_thread_the_same_way(redis_url):
    import redis as sync_redis

    from config import Settings
    from orchestrator import redis_keys
    from orchestrator.distributed.models import InvocationStatus, WorkItem
    from workers.client import Client

    client = Client(Settings(redis_url=redis_url))
    check = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    check.flushdb()
    try:
        check.script_flush()  # a Redis that restarted: the scripts are loaded on the way
        inv = client.enqueue("chat", "u", "hi", invocation_id="e-10")
        record = client.status("chat", inv)
        key = ("chat", "u", record.session_id)
        assert inv == "e-10" and record.status is InvocationStatus.QUEUED
        assert check.exists(redis_keys.session(*key)) == 1  # the new session exists
        assert client.enqueue("chat", "u", "hi again", session_id=key[2], invocation_id=inv) == inv
        assert client.status("chat", inv).new_message == record.new_message  # the first one
        queued = [WorkItem.model_validate_json(raw)
                  for raw in check.lrange(redis_keys.session_queue(*key), 0, -1)]
        assert [(item.kind, item.invocation_id) for item in queued] == [("start", "e-10")]
        wake = redis_keys.wake_stream(client._settings.invocations_queue)
        assert [fields["inv"] for _, fields in check.xrange(wake)] == ["e-10"]
        # Bad input still becomes a failed invocation, stored, that says what was wrong.
        bad = client.enqueue("chat", "u", {"role": "user", "parts": "nope"})  # type: ignore[arg-type]
        failed = client.status("chat", bad)
        assert failed.status is InvocationStatus.FAILED and "new_message" in failed.error
    finally:
        check.close()
        client.close()
