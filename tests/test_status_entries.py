"""Status entries carry the record, unless it is large: then watchers read it.

Every status change adds an entry to two streams of the invocation, kept as long as the
record. With the record inside each, a 400 KB message was kept about a dozen times over.
"""

from __future__ import annotations

from orchestrator import platform
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.distributed.models import InvocationRecord, InvocationStatus


def _record(text: str) -> InvocationRecord:
    return InvocationRecord(invocation_id=platform.new_invocation_id(), app_name="chat",
                            user_id="u", session_id="s",
                            new_message={"role": "user", "parts": [{"text": text}]})


async def test_a_large_record_is_kept_once_and_its_waiters_still_get_it(redis_client):
    store = RedisInvocationStore(redis_client)
    record = _record("x" * 100_000)
    await store.create(record)
    record.status = InvocationStatus.RUNNING
    await store.save(record)
    record.status = InvocationStatus.COMPLETED
    await store.save(record)

    for stream in (keys.invocation_statuses("chat", record.invocation_id),
                   keys.invocation_stream("chat", record.invocation_id)):
        entries = await redis_client.xrange(stream)
        assert [fields["status"] for _, fields in entries] == ["queued", "running", "completed"]
        assert not any("record" in fields for _, fields in entries)
        assert await redis_client.memory_usage(stream) < 20_000

    waited = await store.wait_for("chat", record.invocation_id, {InvocationStatus.COMPLETED},
                                  timeout=5)
    assert waited is not None and waited.new_message == record.new_message


async def test_a_small_record_rides_with_its_status(redis_client):
    store = RedisInvocationStore(redis_client)
    record = _record("hello")
    await store.create(record)
    [(_, fields)] = await redis_client.xrange(keys.invocation_statuses("chat", record.invocation_id))
    assert InvocationRecord.model_validate_json(fields["record"]) == record


async def test_the_live_stream_keeps_statuses_alone(redis_client):
    # Its followers show statuses; a copy of the record per status was about a quarter of
    # what a finished one-tool invocation kept in Redis.
    store = RedisInvocationStore(redis_client)
    record = _record("hello")
    await store.create(record)
    record.status = InvocationStatus.COMPLETED
    await store.save(record)
    live = await redis_client.xrange(keys.invocation_stream("chat", record.invocation_id))
    assert [fields for _, fields in live] == [{"kind": "status", "status": "queued"},
                                              {"kind": "status", "status": "completed"}]
