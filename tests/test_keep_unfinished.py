"""An unfinished invocation outlives the record TTL while it waits; finished ones still expire.

Over a real redis-server; the last test over a real orchestrator process. The TTLs are a few
seconds so that the time an invocation waits can pass the TTL within the test: waiting for
that time is the behaviour under test.
"""

from __future__ import annotations

import asyncio
import time

import redis

from config import Settings
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.keep_alive import keep_unfinished_alive
from orchestrator.backends.redis.session_service import RedisSessionService
from orchestrator.distributed.invocation_lists import invocation_query
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.events.event import Event
from tests.apps import APP_SPECS
from tests.support.processes import stack_env, start_celery_process

TTL = 2


def _record(invocation_id: str, status: InvocationStatus, session_id: str = "s1") -> InvocationRecord:
    return InvocationRecord(app_name="app", invocation_id=invocation_id, user_id="u",
                            session_id=session_id, status=status, created_at=time.time())


async def _saved(store: RedisInvocationStore, record: InvocationRecord) -> None:
    await store.create(record.model_copy(update={"status": InvocationStatus.QUEUED}))
    await store.save(record)


async def _renew_until(redis_client, moment: float) -> None:
    """Run the keeper's passes, as an orchestrator does, until ``moment`` (time.monotonic)."""
    while time.monotonic() < moment:
        await keep_unfinished_alive(redis_client, TTL)
        await asyncio.sleep(TTL / 8)


async def test_a_paused_invocation_is_kept_past_the_ttl_and_stays_listed(redis_client):
    store = RedisInvocationStore(redis_client, record_ttl_seconds=TTL)
    sessions = RedisSessionService(client=redis_client)
    await sessions.create_session(app_name="app", user_id="u", session_id="s1")
    await _saved(store, _record("e-paused", InvocationStatus.PAUSED))
    await _saved(store, _record("e-done", InvocationStatus.COMPLETED))

    await _renew_until(redis_client, time.monotonic() + 2.5 * TTL)

    paused = await store.get("app", "e-paused")
    assert paused is not None and paused.status is InvocationStatus.PAUSED
    assert await store.get("app", "e-done") is None  # a finished one expires as before
    assert await redis_client.exists(keys.invocation_statuses("app", "e-paused"))
    for query in (invocation_query("app", status="paused"),
                  invocation_query("app", user_id="u", session_id="s1")):
        listed = await store.list_invocations(query)
        assert [r.invocation_id for r in listed.records] == ["e-paused"], query
    assert await redis_client.zrange(keys.invocations_in("paused"), 0, -1) == [
        keys.invocation("app", "e-paused")]


async def test_a_queued_invocation_and_a_sessions_busy_mark_are_kept_past_the_ttl(redis_client):
    """A message held behind an invocation busy with its workers stays queued, and held."""
    store = RedisInvocationStore(redis_client, record_ttl_seconds=TTL)
    sessions = RedisSessionService(client=redis_client)
    await sessions.create_session(app_name="app", user_id="u", session_id="s1")
    await _saved(store, _record("e-busy", InvocationStatus.PAUSED))
    await store.create(_record("e-held", InvocationStatus.QUEUED))
    busy = keys.session_busy("app", "u", "s1")
    await redis_client.sadd(busy, "e-busy")  # as the pause's save marks it
    await redis_client.expire(busy, TTL)

    await _renew_until(redis_client, time.monotonic() + 2.5 * TTL)

    held = await store.get("app", "e-held")
    assert held is not None and held.status is InvocationStatus.QUEUED
    assert await redis_client.smembers(busy) == {"e-busy"}
    listed = await store.list_invocations(invocation_query("app", status="queued"))
    assert [r.invocation_id for r in listed.records] == ["e-held"]


async def test_an_invocation_that_went_on_or_whose_session_is_gone_is_not_kept(redis_client):
    store = RedisInvocationStore(redis_client, record_ttl_seconds=TTL)
    sessions = RedisSessionService(client=redis_client)
    await sessions.create_session(app_name="app", user_id="u", session_id="gone")
    await _saved(store, _record("e-orphan", InvocationStatus.PAUSED, session_id="gone"))
    await sessions.delete_session(app_name="app", user_id="u", session_id="gone")

    await _renew_until(redis_client, time.monotonic() + 2 * TTL)

    assert await store.get("app", "e-orphan") is None  # it could never go on
    assert await redis_client.zrange(keys.invocations_in("paused"), 0, -1) == []


def test_an_answer_after_a_pause_longer_than_the_ttl_completes_the_invocation(redis_url):
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + "/15"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, record_ttl_seconds=str(TTL), lease_retry_seconds="0.2")
    orchestrator = start_celery_process("orchestrator", "keep-orch", env)
    client = Client(Settings(redis_url=url, apps=APP_SPECS, record_ttl_seconds=TTL))
    try:
        inv = client.enqueue("approval", "u", "pay")
        record = client.wait("approval", inv, timeout=30)
        assert record.status is InvocationStatus.PAUSED, record.error
        [call_id] = record.pending_calls

        # Someone takes their time: three TTLs pass (the record would have expired twice).
        time.sleep(3 * TTL)
        still = client.status("approval", inv)
        assert still is not None and still.status is InvocationStatus.PAUSED, orchestrator.output()

        client.answer("approval", inv, call_id, {"approved": True})
        record = client.wait("approval", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        assert client.events("approval", inv)[-1].content.parts[0].text == "approval: {'approved': True}"
    finally:
        client.close()
        orchestrator.stop()


def test_a_message_held_behind_a_pause_longer_than_the_ttl_runs_after_it(redis_url):
    """A pause on a worker's call holds the session's next message however long it lasts."""
    from tests.apps import PARKED_QUEUE
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + "/15"
    check = redis.Redis.from_url(url, decode_responses=True)
    check.flushdb()
    env = stack_env(url, APP_SPECS, record_ttl_seconds=str(TTL), lease_retry_seconds="0.2")
    orchestrator = start_celery_process("orchestrator", "held-orch", env)
    worker = None
    client = Client(Settings(redis_url=url, apps=APP_SPECS, record_ttl_seconds=TTL))
    try:
        first = client.enqueue("parked_plain", "u", "first")
        record = client.wait("parked_plain", first, timeout=30)
        assert record.status is InvocationStatus.PAUSED, record.error  # its job waits: no worker
        session_id = record.session_id
        second = client.enqueue("parked_plain", "u", "second", session_id=session_id)

        # The job waits three TTLs in its queue (no deadline): the busy mark would have
        # expired with its first TTL, and the held message's record after it.
        time.sleep(3 * TTL)
        held = client.status("parked_plain", second)
        assert held is not None and held.status is InvocationStatus.QUEUED, orchestrator.output()

        worker = start_celery_process("worker", "held-worker", env, "-Q", f"{PARKED_QUEUE},adk.tools")
        for invocation_id in (first, second):
            done = client.wait("parked_plain", invocation_id, timeout=30,
                               until=InvocationStatus.FINISHED)
            assert done.status is InvocationStatus.COMPLETED, done.error
        # The second message ran once the first invocation was done: never inside its turn.
        stored = check.lrange(keys.session_events("parked_plain", "u", session_id), 0, -1)
        order = [_invocation_of(raw) for raw in stored]
        assert order == sorted(order, key=lambda inv: inv != first), order
    finally:
        client.close()
        if worker is not None:
            worker.stop()
        orchestrator.stop()


def _invocation_of(raw: str) -> str:
    """The invocation id of a stored session event (its wire JSON)."""
    return Event.from_wire(raw).invocation_id
