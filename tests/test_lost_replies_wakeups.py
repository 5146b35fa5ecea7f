"""Wake-ups delivered by a read or a claim whose reply was lost are drained within seconds.

The Redis client sends a command again when its reply is lost (``tests/support/reply_loss.py``):
an ``XREADGROUP ... >`` run twice delivers its entries to the consumer and never returns them;
an ``XAUTOCLAIM`` run twice finds the entries it claimed no longer idle. Before the consumer
looked at its own pending list, those sessions waited for the reclaim (the lease TTL, 30 s).
The look must not take in twice an entry a drain already follows, nor one a failing drain gave
up on (the reclaim after idle time takes that one up, as before).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from orchestrator.backends.redis import wake_consumer as consumer_module
from orchestrator.backends.redis.wakeups import GROUP, RedisWakeups
from tests.support.reply_loss import ReplyLosingProxy

STREAM = "adk:wake:{lost}"
KEY = ("chat", "u", "s-1")
FIELDS = {"app": "chat", "user": "u", "session": "s-1", "inv": "e-1"}


async def _until(event: asyncio.Event, what: str, timeout: float) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out ({timeout} s) waiting for {what}") from None


async def _eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out ({timeout} s) waiting for {what}")
        await asyncio.sleep(0.02)


def _count_looks(monkeypatch) -> Callable[[int], asyncio.Event]:
    """Count the consumer's looks at its pending list; ``after(n)``: set once n more ran."""
    original = consumer_module.claim_unfollowed
    waiting: list[tuple[int, asyncio.Event]] = []
    looks = 0

    async def counted(*args, **kwargs):
        nonlocal looks
        found = await original(*args, **kwargs)
        looks += 1
        for target, event in waiting:
            if looks >= target:
                event.set()
        return found

    def after(more: int) -> asyncio.Event:
        event = asyncio.Event()
        waiting.append((looks + more, event))
        return event

    monkeypatch.setattr(consumer_module, "claim_unfollowed", counted)
    return after


async def test_a_wake_up_whose_read_reply_is_lost_is_drained_within_seconds(proxied, redis_client):
    proxy, client = proxied
    wakeups = RedisWakeups(client, STREAM)
    await wakeups.ensure_group()
    drained: list[tuple] = []
    done = asyncio.Event()

    async def drain(key, hint):
        drained.append((key, hint))
        done.set()
        return True

    await redis_client.xadd(STREAM, FIELDS)
    proxy.needle = b"XREADGROUP"  # the first read delivers the entry; its reply is lost
    consumer = wakeups.consumer(drain, reclaim_idle_seconds=30.0, retry_seconds=0.05)
    consumer.start()
    try:
        await _until(done, "the drain of the entry the lost read delivered", timeout=5.0)
        await _eventually(lambda: _pending_is(redis_client, 0), "the entry's acknowledgement")
    finally:
        await consumer.stop(timeout=1.0)
    assert proxy.lost == 1
    assert drained == [(KEY, "e-1")]


async def test_a_wake_up_whose_reclaim_reply_is_lost_is_drained_within_seconds(
        proxied, redis_client):
    proxy, client = proxied
    wakeups = RedisWakeups(client, STREAM)
    await wakeups.ensure_group()
    await redis_client.xadd(STREAM, FIELDS)
    # An orchestrator read it and died long ago (idle 60 s: due for the reclaim).
    [[_, [(entry_id, _)]]] = await redis_client.xreadgroup(GROUP, "dead", {STREAM: ">"})
    await redis_client.xclaim(STREAM, GROUP, "dead", 0, [entry_id], idle=60_000)
    done = asyncio.Event()
    lost_when_drained: list[int] = []

    async def drain(key, hint):
        lost_when_drained.append(proxy.lost)
        done.set()
        return True

    proxy.needle = b"XAUTOCLAIM"
    # Reclaim every 5 s, after 20 s of idle time: the entry the lost claim took (idle reset)
    # would wait 20 s more.
    consumer = wakeups.consumer(drain, reclaim_idle_seconds=20.0, retry_seconds=0.05)
    consumer.start()
    try:
        await _eventually(lambda: _lost(proxy), "the reclaim (after 5 s)", timeout=10.0)
        await _until(done, "the drain of the entry the lost claim took", timeout=4.0)
        await _eventually(lambda: _pending_is(redis_client, 0), "the entry's acknowledgement")
    finally:
        await consumer.stop(timeout=1.0)
    assert lost_when_drained == [1]  # taken over by the reclaim, not by the look before it


async def test_an_entry_followed_by_a_long_drain_is_not_taken_in_again(monkeypatch, redis_client):
    after = _count_looks(monkeypatch)
    wakeups = RedisWakeups(redis_client, STREAM)
    await wakeups.ensure_group()
    started, release = asyncio.Event(), asyncio.Event()
    drains = 0

    async def drain(key, hint):
        nonlocal drains
        drains += 1
        started.set()
        await release.wait()
        return True

    consumer = wakeups.consumer(drain, reclaim_idle_seconds=30.0)
    consumer.start()
    try:
        await wakeups.post(KEY, "e-1")
        await _until(started, "the drain", timeout=5.0)
        await _until(after(3), "three looks while the drain runs", timeout=10.0)
        [row] = await redis_client.xpending_range(STREAM, GROUP, "-", "+", 10)
        assert row["times_delivered"] == 1  # not claimed again by a look
        release.set()
        await _eventually(lambda: _pending_is(redis_client, 0), "the entry's acknowledgement")
        await _until(after(2), "two looks once it ended", timeout=10.0)
    finally:
        await consumer.stop(timeout=1.0)
    assert drains == 1


async def test_an_entry_a_failing_drain_gave_up_on_waits_for_the_reclaim(monkeypatch, redis_client):
    after = _count_looks(monkeypatch)
    wakeups = RedisWakeups(redis_client, STREAM)
    await wakeups.ensure_group()
    failed = asyncio.Event()
    drains = 0

    async def drain(key, hint):
        nonlocal drains
        drains += 1
        failed.set()
        raise RuntimeError("a bug")

    consumer = wakeups.consumer(drain, reclaim_idle_seconds=30.0)
    consumer.start()
    try:
        await wakeups.post(KEY, "e-1")
        await _until(failed, "the failing drain", timeout=5.0)
        await _until(after(3), "three looks after it", timeout=10.0)
    finally:
        await consumer.stop(timeout=1.0)
    assert drains == 1  # not retried every second: claimed again once idle, as before
    assert await _pending_is(redis_client, 1)


async def _pending_is(client: aioredis.Redis, count: int) -> bool:
    return int((await client.xpending(STREAM, GROUP))["pending"]) == count


async def _lost(proxy: ReplyLosingProxy) -> bool:
    return proxy.lost == 1
