"""The API server's one stream reader (workers/api/stream_hub.py) against a real redis-server.

Followers of many invocations share one blocking read; each must still see exactly its own
stream, in order, as ``RedisEventStream.follow`` shows it: replayed from the start or resumed
after an entry, stopped at a terminal status or at a pause that is the latest entry.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.streams import RedisEventStream
from orchestrator.distributed.models import InvocationStatus, ToolResult
from tests.test_event_stream import APP, _call_event, _Pair, _record, _text_event
from workers.api.stream_hub import StreamHub
from workers.api.watches import LiveItem, Watch

S = InvocationStatus
GUARD = 10.0
"""Seconds after which a follower that should have been served counts as stuck."""


@pytest.fixture
async def client(redis_url):
    redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
    await redis.flushdb()
    try:
        yield redis
    finally:
        await redis.aclose()


@pytest.fixture
def pair(client):
    return _Pair(RedisEventStream(client, ttl_seconds=60), RedisInvocationStore(client, record_ttl_seconds=60))


@pytest.fixture
async def hub(redis_url, client):
    # A long block: a follower served only once a read times out would hang the test.
    hub = StreamHub(redis_url, client, block_ms=60_000)
    try:
        yield hub
    finally:
        await hub.aclose()


def _shape(items: list[LiveItem]) -> list[object]:
    return [item.status if item.kind == "status" else (item.event.id, item.partial) for item in items]


async def _collect(hub: StreamHub, invocation_id: str = "e-1", **kwargs) -> list[LiveItem]:
    return [item async for item in hub.follow(APP, invocation_id, **kwargs)]


async def test_follow_shows_a_stream_as_redis_event_stream_does(hub, pair):
    record = _record()
    chunk, call = _text_event("Hel", partial=True), _call_event()
    await pair.status(record, S.QUEUED)
    await pair.status(record, S.RUNNING)
    await pair.stream.publish(record, chunk)
    await pair.stream.publish(record, call)
    await pair.status(record, S.PAUSED)

    items = await _collect(hub, timeout=GUARD)
    assert _shape(items) == [S.QUEUED, S.RUNNING, (chunk.id, True), (call.id, False), S.PAUSED]
    assert items[3].wire == call.to_wire() and items[3].event == call
    assert items[4].record is None  # the live stream keeps statuses alone (readers read it)
    # FINISHED follows through the latest pause (nothing more comes: the timeout hits).
    with pytest.raises(TimeoutError):
        await _collect(hub, until=InvocationStatus.FINISHED, timeout=0.3)

    answer = _text_event("answered")
    await pair.stream.publish(record, answer)
    await pair.status(record, S.COMPLETED)
    full = [S.QUEUED, S.RUNNING, (chunk.id, True), (call.id, False), S.PAUSED, (answer.id, False),
            S.COMPLETED]
    # A replay goes past a pause resumed since; a terminal status ends every follow.
    assert _shape(await _collect(hub, until=InvocationStatus.SETTLED, timeout=GUARD)) == full
    # Resuming after an entry (Last-Event-ID) shows only what came after it.
    assert _shape(await _collect(hub, after=items[4].entry_id, timeout=GUARD)) == full[5:]


async def test_a_follower_that_starts_while_the_read_is_blocked_is_served_at_once(hub, pair):
    first, second = _record("e-1"), _record("e-2")
    waiting = hub.follow(APP, "e-1", timeout=GUARD)
    await pair.status(first, S.QUEUED)
    # Handed out: the reader has sent its next read, which names e-1's stream only.
    assert (await waiting.__anext__()).status is S.QUEUED
    later = asyncio.create_task(_collect(hub, "e-2", timeout=GUARD))
    await pair.status(second, S.QUEUED)
    await pair.status(second, S.COMPLETED)
    # Without a wake-up, e-2's follower would wait out the 60 s block.
    assert _shape(await later) == [S.QUEUED, S.COMPLETED]
    await pair.status(first, S.FAILED)
    assert [item.status async for item in waiting] == [S.FAILED]
    # The process's wake stream does not outlive it for long.
    [wake] = [key async for key in pair.store._redis.scan_iter(match=keys.api_wake("*"))]
    assert 0 < await pair.store._redis.ttl(wake) <= 3600


async def test_followers_of_one_stream_at_different_places_each_get_their_part(hub, pair):
    record = _record()
    await pair.status(record, S.QUEUED)
    await pair.status(record, S.RUNNING)
    replay = hub.follow(APP, "e-1", timeout=GUARD)
    seen = await replay.__anext__()
    await replay.aclose()
    at_tail = asyncio.create_task(_collect(hub, after=(await _last_id(pair, record)), timeout=GUARD))
    from_start = asyncio.create_task(_collect(hub, timeout=GUARD))
    after_first = asyncio.create_task(_collect(hub, after=seen.entry_id, timeout=GUARD))
    event = _text_event("x")
    await pair.stream.publish(record, event)
    await pair.status(record, S.COMPLETED)
    assert _shape(await at_tail) == [(event.id, False), S.COMPLETED]
    assert _shape(await from_start) == [S.QUEUED, S.RUNNING, (event.id, False), S.COMPLETED]
    assert _shape(await after_first) == [S.RUNNING, (event.id, False), S.COMPLETED]


async def _last_id(pair: _Pair, record) -> str:
    stream = pair.stream._redis
    latest = await stream.xrevrange(keys.invocation_stream(APP, record.invocation_id), count=1)
    return latest[0][0]


async def test_a_stream_longer_than_one_read_still_stops_at_its_latest_pause(redis_url, client, pair):
    hub = StreamHub(redis_url, client, block_ms=60_000, read_count=3)
    try:
        record = _record()
        await pair.status(record, S.QUEUED)
        await pair.status(record, S.RUNNING)
        events = [_text_event(str(n)) for n in range(3)]
        for event in events:
            await pair.stream.publish(record, event)
        await pair.status(record, S.PAUSED)  # 6 entries: the pause ends the second read of 3
        assert _shape(await _collect(hub, timeout=GUARD)) == [
            S.QUEUED, S.RUNNING, *[(e.id, False) for e in events], S.PAUSED]
    finally:
        await hub.aclose()


async def test_many_followers_each_see_only_their_own_invocation(hub, pair):
    records = [_record(f"e-{n}") for n in range(40)]
    followers = [asyncio.create_task(_collect(hub, r.invocation_id, timeout=GUARD)) for r in records]
    for record in records:
        await pair.status(record, S.QUEUED)
    for n, record in enumerate(records):
        await pair.stream.publish(record, _text_event(f"answer {n}"))
        await pair.status(record, S.COMPLETED)
    for n, follower in enumerate(followers):
        items = await follower
        assert [i.status for i in items if i.kind == "status"] == [S.QUEUED, S.COMPLETED]
        assert [i.event.content.parts[0].text for i in items if i.kind == "event"] == [f"answer {n}"]


async def test_unknown_entry_kinds_are_skipped_and_a_follower_that_leaves_disturbs_no_one(
        hub, pair, client):
    record, other = _record("e-1"), _record("e-2")
    await pair.status(record, S.QUEUED)
    await client.xadd(keys.invocation_stream(APP, "e-1"), {"kind": "from-a-later-version"})
    leaving = hub.follow(APP, "e-2", timeout=GUARD)
    staying = asyncio.create_task(_collect(hub, "e-2", timeout=GUARD))
    await pair.status(other, S.QUEUED)
    assert (await leaving.__anext__()).status is S.QUEUED
    await leaving.aclose()
    record.status = S.FAILED
    await pair.store.save(record)
    # The unknown entry is the last before the status: it is read past, not read forever.
    assert _shape(await _collect(hub, "e-1", timeout=GUARD)) == [S.QUEUED, S.FAILED]
    await pair.status(other, S.COMPLETED)
    assert _shape(await staying) == [S.QUEUED, S.COMPLETED]


async def test_a_call_left_to_outside_after_a_pause_does_not_hide_the_pause(hub, pair):
    record = _record()
    await pair.status(record, S.QUEUED)
    await pair.status(record, S.PAUSED)
    await pair.store.put_result(APP, "e-1", ToolResult(function_call_id="c1", tool_name="tool"))
    assert _shape(await _collect(hub, timeout=GUARD)) == [S.QUEUED, S.PAUSED]


async def test_a_read_that_fails_fails_its_followers_and_the_reader_goes_on(hub, pair, client):
    await client.set(keys.invocation_stream(APP, "e-bad"), "not a stream")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await _collect(hub, "e-bad", timeout=GUARD)
    record = _record()
    await pair.status(record, S.QUEUED)
    await pair.status(record, S.COMPLETED)
    assert _shape(await _collect(hub, timeout=GUARD)) == [S.QUEUED, S.COMPLETED]


async def test_a_read_whose_connection_drops_is_sent_again_and_its_followers_never_notice(hub, pair, client):
    waiting = asyncio.create_task(_collect(hub, "e-1", timeout=GUARD))
    # Blocked in Redis: the hub says so as it sends the read, Redis sees it a moment later.
    while not (readers := [c for c in await client.client_list() if c.get("cmd") == "xread"]):
        await asyncio.sleep(0.01)
    [reader] = readers
    await client.client_kill_filter(_id=reader["id"])  # as a Redis restart or a network cut would
    record = _record()
    await pair.status(record, S.QUEUED)
    await pair.status(record, S.COMPLETED)
    assert _shape(await waiting) == [S.QUEUED, S.COMPLETED]


async def test_a_follower_told_of_a_failed_read_waits_for_the_next_read():
    # A run follows on through an outage: after the failure, its next read waits for news
    # rather than returning at once with nothing (and the outage logged again each time).
    watch = Watch("stream", "0-0")
    watch.fail(ConnectionError("Redis gone"))
    with pytest.raises(ConnectionError):
        await watch.read()
    with pytest.raises(TimeoutError):
        await watch.read(0)
    item = LiveItem("1-0", "status", status=S.COMPLETED)
    watch.deliver([item], "1-0", (1, 0), True)
    assert await watch.read(0) == ([item], True)
