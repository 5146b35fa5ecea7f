"""One writer per session on real Redis: leases expire, leftovers are recovered, stale writers fenced."""

from __future__ import annotations

import pytest
import redis as sync_redis

from config import Settings
from orchestrator import Event, platform
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.session_queue import RedisSessionQueue
from orchestrator.backends.redis.session_service import RedisSessionService
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, WorkItem
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.service import InvocationService
from orchestrator.errors import StaleSessionError
from tests.apps import ALL_APPS, APP_SPECS
from tests.support.events import simplify_all
from tests.support.processes import stack_env, start_celery_process


@pytest.fixture
async def parts(redis_client):
    sessions = RedisSessionService(client=redis_client)
    store = RedisInvocationStore(redis_client)
    queue = RedisSessionQueue(redis_client, lease_ttl_seconds=30)
    service = InvocationService(AppRegistry(ALL_APPS), session_service=sessions, store=store, queue=queue)
    return sessions, store, queue, service


async def _queued(sessions, service, text="hi"):
    session = await sessions.create_session(app_name="chat", user_id="u")
    record = InvocationRecord(
        invocation_id=platform.new_invocation_id(), app_name="chat", user_id="u",
        session_id=session.id, new_message={"role": "user", "parts": [{"text": text}]},
    )
    await service.submit(record)
    return record, ("chat", "u", session.id)


async def test_a_held_lease_blocks_other_orchestrators_until_released(parts):
    sessions, store, queue, service = parts
    record, key = await _queued(sessions, service)
    taken = await queue.take(key)  # another orchestrator holds the session, item claimed
    assert taken is not None and taken.item.invocation_id == record.invocation_id

    assert await service.drain(key) is False  # someone else holds the session
    assert (await store.get("chat", record.invocation_id)).status is InvocationStatus.QUEUED

    await queue.release(key, taken.token)  # (its item stays claimed: the next holder runs it)
    assert await service.drain(key) is True
    assert (await store.get("chat", record.invocation_id)).status is InvocationStatus.COMPLETED


async def test_tokens_increase_and_release_needs_the_current_token(parts, redis_client):
    _, _, queue, _ = parts
    key = ("chat", "u", "s")
    await queue.push(key, WorkItem(kind="start", invocation_id="i-1"))  # the lease is kept
    first = (await queue.take(key)).token
    await queue.release(key, "not-the-token")
    assert await queue.take(key) is None
    await queue.release(key, first)
    second = (await queue.take(key)).token
    assert int(second) > int(first)
    assert await queue.renew(key, second) and not await queue.renew(key, first)


async def test_work_left_in_progress_by_a_dead_holder_is_recovered(parts, redis_client):
    sessions, store, queue, service = parts
    record, key = await _queued(sessions, service)
    dead = await queue.take(key)  # took the item, then "died"
    assert (dead.item.kind, dead.item.invocation_id) == ("start", record.invocation_id)
    assert await service.drain(key) is False  # its lease still stands

    await redis_client.delete(_lease(key))  # the lease expires (its TTL ran out)
    assert await service.drain(key) is True  # the next holder recovers and runs the item
    done = await store.get("chat", record.invocation_id)
    assert done.status is InvocationStatus.COMPLETED
    session = await sessions.get_session(app_name="chat", user_id="u", session_id=key[2])
    assert simplify_all(session.events) == [("user", "hi"), ("agent", "reply to hi")]


async def test_taking_a_hinted_item_reads_its_invocation_and_session_too(parts, redis_client):
    sessions, store, queue, service = parts
    record, key = await _queued(sessions, service, "first")
    await service.drain(key)  # one committed exchange, so the session has history
    second, _ = await _queued_in(key, service, "second")
    await redis_client.script_flush()  # a restarted Redis has forgotten the scripts

    token, item, loaded = await queue.take(key, hint=second.invocation_id)
    assert (item.kind, item.invocation_id) == ("start", second.invocation_id)
    assert loaded.record.invocation_id == second.invocation_id and not loaded.cancelled
    stored = await sessions.get_session(app_name="chat", user_id="u", session_id=key[2])
    assert loaded.session.model_dump() == stored.model_dump()  # what a plain read returns
    assert simplify_all(loaded.session.events) == [("user", "first"), ("agent", "reply to first")]
    assert await queue.claim_or_release(key, token, finished=item) is None  # released

    # A hint for another invocation (a late wake-up): the item comes without the extras.
    third, _ = await _queued_in(key, service, "third")
    token, item, loaded = await queue.take(key, hint=record.invocation_id)
    assert item.invocation_id == third.invocation_id and loaded is None
    await queue.release(key, token)


async def test_a_later_lease_reads_only_new_events_and_sees_others_writes(parts, redis_client):
    """The copy kept from the last drain: taken with it, the session equals a full read."""
    sessions, store, queue, service = parts
    _, key = await _queued(sessions, service, "first")
    await service.drain(key)
    await _queued_in(key, service, "second")
    await service.drain(key)
    known = service.sessions_read.take(key)
    assert simplify_all(known.events) == [("user", "first"), ("agent", "reply to first")]
    # Someone else (another orchestrator, a client) writes in between.
    other = await sessions.get_session(app_name="chat", user_id="u", session_id=key[2])
    await sessions.append_event(other, Event(invocation_id="e-x", author="user", content=(
        {"role": "user", "parts": [{"text": "aside"}]})))
    third, _ = await _queued_in(key, service, "third")

    token, item, loaded = await queue.take(key, hint=third.invocation_id, known=known)
    stored = await sessions.get_session(app_name="chat", user_id="u", session_id=key[2])
    assert loaded.session.model_dump() == stored.model_dump()
    assert simplify_all(loaded.session.events) == [
        ("user", "first"), ("agent", "reply to first"), ("user", "second"),
        ("agent", "reply to second"), ("user", "aside")]
    assert loaded.session.events[0] is known.events[0]  # not parsed again
    await queue.claim_or_release(key, token, finished=item)


async def test_a_session_made_again_under_its_id_is_not_mistaken_for_the_kept_copy(parts):
    sessions, store, queue, service = parts
    record, key = await _queued(sessions, service, "first life")
    await service.drain(key)
    await _queued_in(key, service, "still the first life")
    await service.drain(key)
    await service.drain(key)  # nothing queued: the kept copy stays
    await sessions.delete_session(app_name="chat", user_id="u", session_id=key[2])
    await sessions.create_session(app_name="chat", user_id="u", session_id=key[2])
    for text in ("second life", "second life, two"):  # as many events as the kept copy
        await sessions.append_event(
            await sessions.get_session(app_name="chat", user_id="u", session_id=key[2]),
            Event(invocation_id="e-y", author="user",
                  content={"role": "user", "parts": [{"text": text}]}))
    second, _ = await _queued_in(key, service, "again")

    assert await service.drain(key, hint=second.invocation_id) is True
    assert (await store.get("chat", second.invocation_id)).status is InvocationStatus.COMPLETED
    session = await sessions.get_session(app_name="chat", user_id="u", session_id=key[2])
    # The model saw the second life only: its reply names the last message it was given.
    assert simplify_all(session.events) == [("user", "second life"), ("user", "second life, two"),
                                            ("user", "again"), ("agent", "reply to again")]
    # What that run read (and its model was shown) is the second life, kept for the next one.
    assert simplify_all(service.sessions_read.take(key).events) == [
        ("user", "second life"), ("user", "second life, two")]


async def _queued_in(key, service, text):
    record = InvocationRecord(
        invocation_id=platform.new_invocation_id(), app_name="chat", user_id="u",
        session_id=key[2], new_message={"role": "user", "parts": [{"text": text}]},
    )
    await service.submit(record)
    return record, key


def _lease(key):
    from orchestrator.backends.redis import keys as redis_keys

    return redis_keys.session_lease(*key)


async def test_a_holder_that_lost_its_lease_cannot_append(parts, redis_client):
    sessions, _, queue, _ = parts
    session = await sessions.create_session(app_name="chat", user_id="u")
    key = ("chat", "u", session.id)
    await queue.push(key, WorkItem(kind="start", invocation_id="e-1"))  # the lease is kept
    stale = (await queue.take(key)).token
    await redis_client.delete(_lease(key))  # the lease expired...
    fresh = (await queue.take(key)).token  # ...and another orchestrator took it
    assert fresh != stale
    with pytest.raises(StaleSessionError):
        await sessions.leased_writer(_lease(key), stale).append_event(
            session, Event(author="agent", invocation_id="e-1"))
    await sessions.leased_writer(_lease(key), fresh).append_event(
        session, Event(author="agent", invocation_id="e-1"))
    stored = await sessions.get_session(app_name="chat", user_id="u", session_id=session.id)
    assert len(stored.events) == 1


def test_an_orchestrator_that_died_holding_a_session_does_not_block_it(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/5"
    sync_redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.1")
    orchestrator = start_celery_process("orchestrator", "orch-lease", env)
    from workers.client import Client

    client = Client(Settings(redis_url=url, apps=APP_SPECS))
    try:
        session = client.create_session("chat", "u")
        key = ("chat", "u", session.id)
        # A holder that died: its lease is still there, with a short time to live.
        sync_redis.Redis.from_url(url).set(_lease(key), "999999", px=1500)
        invocation_id = client.enqueue("chat", "u", "hello", session_id=session.id)
        record = client.wait("chat", invocation_id, timeout=20,
                             until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        assert simplify_all(client.events("chat", invocation_id))[-1] == ("agent", "reply to hello")
    finally:
        client.close()
        orchestrator.stop()


async def test_a_holder_that_lost_its_lease_cannot_save_its_record_or_take_an_item(
        parts, redis_client):
    # A holder stalled past its lease wakes up with its record of the invocation as it last
    # saw it: that must not overwrite what the next holder saved (a completed invocation put
    # back to "paused"), nor may it take the next item from under the new holder.
    sessions, store, queue, service = parts
    record, key = await _queued(sessions, service)
    stale = (await queue.take(key)).token
    await redis_client.delete(_lease(key))  # the lease expired...
    fresh = (await queue.take(key)).token  # ...another orchestrator took it and finished
    done = record.model_copy(update={"status": InvocationStatus.COMPLETED})
    assert await queue.claim_or_release(key, fresh, save=done) is None
    await queue.push(key, WorkItem(kind="start", invocation_id="e-next"))
    fresh = (await queue.take(key, None, None)).token

    old_view = record.model_copy(update={"status": InvocationStatus.PAUSED,
                                         "pending_calls": ["c-1"]})
    with pytest.raises(StaleSessionError):
        await queue.claim_or_release(key, stale, save=old_view)
    assert (await store.get("chat", record.invocation_id)).status is InvocationStatus.COMPLETED
    assert await redis_client.get(_lease(key)) == fresh  # the new holder keeps its lease
