"""Lists of invocations at the store: the in-memory and the Redis store (a real redis-server)
answer the same queries; the Redis index is written with the record and follows its expiry."""

from __future__ import annotations

import asyncio
import time

import pytest

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.session_queue import RedisSessionQueue
from orchestrator.backends.redis.session_service import RedisSessionService
from orchestrator.distributed.invocation_lists import InvocationQuery, Position, invocation_query
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.errors import RequestError

Q, R, P, C, F = (InvocationStatus.QUEUED, InvocationStatus.RUNNING, InvocationStatus.PAUSED,
                 InvocationStatus.COMPLETED, InvocationStatus.FAILED)


def record(invocation_id: str, session_id: str = "s1", *, user_id: str = "u", app_name: str = "app",
           created_at: float | None = None) -> InvocationRecord:
    extra = {} if created_at is None else {"created_at": created_at}
    return InvocationRecord(invocation_id=invocation_id, app_name=app_name, user_id=user_id,
                            session_id=session_id, **extra)


async def moved(store, rec: InvocationRecord, status: InvocationStatus) -> None:
    rec.status = status
    await store.save(rec)


async def every_page(store, query: InvocationQuery) -> list[list[str]]:
    pages = []
    while True:
        page = await store.list_invocations(query)
        pages.append([r.invocation_id for r in page.records])
        if page.next_cursor is None:
            return pages
        query = invocation_query(query.app_name, status=query.status, user_id=query.user_id,
                                 session_id=query.session_id, limit=query.limit, cursor=page.next_cursor)


async def test_a_sessions_invocations_newest_first_and_by_status(store):
    records = [record(f"e-{i}", created_at=1000.0 + i) for i in range(4)]
    records.append(record("e-other", "s2", created_at=2000.0))
    records.append(record("e-bob", user_id="bob", created_at=3000.0))  # bob's own session s1
    for rec in records:
        assert await store.create(rec)
    for rec, status in zip(records[:4], (C, F, P, R), strict=True):
        await moved(store, rec, status)

    session = await store.list_invocations(invocation_query("app", user_id="u", session_id="s1"))
    assert [r.invocation_id for r in session.records] == ["e-3", "e-2", "e-1", "e-0"]
    assert session.next_cursor is None
    assert [r.status for r in session.records] == [R, P, F, C]
    paused = await store.list_invocations(invocation_query("app", user_id="u", session_id="s1",
                                                           status="paused"))
    assert [r.invocation_id for r in paused.records] == ["e-2"]

    by_status = {s: [r.invocation_id for r in (await store.list_invocations(
        invocation_query("app", status=s.value))).records] for s in InvocationStatus}
    assert by_status == {Q: ["e-bob", "e-other"], R: ["e-3"], P: ["e-2"], F: ["e-1"],
                         C: ["e-0"], InvocationStatus.CANCELLED: []}
    # Latest saved first: e-3 was saved last, the queued ones before every save.
    everything = await store.list_invocations(invocation_query("app"))
    assert [r.invocation_id for r in everything.records] == [
        "e-3", "e-2", "e-1", "e-0", "e-bob", "e-other"]
    assert (await store.list_invocations(invocation_query("other-app"))).records == []


async def test_paging_visits_each_invocation_once_even_on_equal_times(store):
    ids = [f"e-{i:02d}" for i in range(11)]
    for i, invocation_id in enumerate(ids):  # three groups sharing a creation time
        await store.create(record(invocation_id, created_at=100.0 + i // 4))
    pages = await every_page(store, invocation_query("app", user_id="u", session_id="s1", limit=3))
    assert [len(page) for page in pages] == [3, 3, 3, 2]
    expected = sorted(ids, key=lambda i: (100.0 + int(i[2:]) // 4, i), reverse=True)
    assert [i for page in pages for i in page] == expected

    app_pages = await every_page(store, invocation_query("app", status="queued", limit=4))
    assert sorted(i for page in app_pages for i in page) == ids and len(app_pages) == 3


async def test_a_page_ends_exactly_at_the_limit(store):
    for i in range(4):
        await store.create(record(f"e-{i}", created_at=10.0 + i))
    query = invocation_query("app", user_id="u", session_id="s1", limit=4)
    page = await store.list_invocations(query)
    assert len(page.records) == 4 and page.next_cursor is None


def test_list_requests_are_checked_naming_the_field():
    with pytest.raises(RequestError, match=r"^status: must be one of queued, running"):
        invocation_query("app", status="sleeping")
    with pytest.raises(RequestError, match=r"^limit: must be a whole number from 1 to 500"):
        invocation_query("app", limit=0)
    with pytest.raises(RequestError, match=r"^session_id: is required"):
        invocation_query("app", user_id="u")
    with pytest.raises(RequestError, match=r"^user_id: 'a b'"):
        invocation_query("app", user_id="a b", session_id="s")
    with pytest.raises(RequestError, match=r"^cursor: is not a cursor this list returned"):
        invocation_query("app", cursor="garbage!")
    session_cursor = invocation_query("app", user_id="u", session_id="s").cursor(Position(1.0, "e-1"))
    with pytest.raises(RequestError, match=r"^cursor:"):  # a session list's cursor, for the app's
        invocation_query("app", cursor=session_cursor)


# --- Redis only: the index is written with the record ---------------------------------------


async def _members(client, key: str) -> list[str]:
    return await client.zrange(key, 0, -1)


async def test_the_index_moves_with_the_record_in_the_same_step(redis_client):
    store = RedisInvocationStore(redis_client)
    rec = record("e-1")
    await store.create(rec)
    for status in (R, P, R, C):
        await moved(store, rec, status)
        homes = [s for s in InvocationStatus
                 if await redis_client.zscore(keys.app_invocations("app", s.value), "e-1") is not None]
        assert homes == [status]
    # The session queue's claim-or-release saves records with the same script.
    queue = RedisSessionQueue(redis_client)
    rec.status = F
    await redis_client.set(keys.session_lease("app", "u", "s1"), "held")  # only a holder saves
    await queue.claim_or_release(("app", "u", "s1"), "held", save=rec)
    assert await _members(redis_client, keys.app_invocations("app", "failed")) == ["e-1"]
    assert await _members(redis_client, keys.app_invocations("app", "completed")) == []


async def test_key_names_built_in_lua_are_the_ones_python_reads(redis_client):
    store = RedisInvocationStore(redis_client)
    odd = record("e:{1}%", "s:{x}%", user_id="u:{y}%", app_name="a:{z}%")
    await store.create(odd)
    assert await _members(redis_client, keys.session_invocations("a:{z}%", "u:{y}%", "s:{x}%")) == ["e:{1}%"]
    assert await _members(redis_client, keys.app_invocations("a:{z}%", "queued")) == ["e:{1}%"]
    page = await store.list_invocations(InvocationQuery("a:{z}%", user_id="u:{y}%", session_id="s:{x}%"))
    assert [r.invocation_id for r in page.records] == ["e:{1}%"]


async def test_a_record_saved_before_the_index_leaves_its_old_list(redis_client):
    store = RedisInvocationStore(redis_client)
    rec = record("e-old")
    await store.create(rec)
    await redis_client.hdel(keys.invocation("app", "e-old"), "status")  # as an older version wrote it
    await moved(store, rec, C)
    assert await _members(redis_client, keys.app_invocations("app", "queued")) == []
    assert await _members(redis_client, keys.app_invocations("app", "completed")) == ["e-old"]


async def _expired(redis_client, *record_keys: str) -> None:
    deadline = time.monotonic() + 10
    while await redis_client.exists(*record_keys):
        assert time.monotonic() < deadline, "records did not expire"
        await asyncio.sleep(0.05)


async def test_index_entries_go_when_their_records_expire(redis_client):
    short = RedisInvocationStore(redis_client, record_ttl_seconds=2)
    first, second = record("e-1", created_at=1.0), record("e-2", created_at=2.0)
    await short.create(first)
    await short.create(second)
    await _expired(redis_client, keys.invocation("app", "e-1"), keys.invocation("app", "e-2"))
    # Reads skip what expired; the sets themselves expire with their last record.
    assert (await short.list_invocations(invocation_query("app"))).records == []
    assert not await redis_client.exists(keys.app_invocations("app", "queued"),
                                         keys.session_invocations("app", "u", "s1"))

    await short.create(record("e-3", created_at=3.0))
    await _expired(redis_client, keys.invocation("app", "e-3"))
    await short.create(record("e-4", created_at=4.0))  # a new entry drops the expired ones
    assert await _members(redis_client, keys.session_invocations("app", "u", "s1")) == ["e-4"]
    assert await _members(redis_client, keys.app_invocations("app", "queued")) == ["e-4"]


async def test_deleting_a_session_forgets_its_list(redis_client):
    store, sessions = RedisInvocationStore(redis_client), RedisSessionService(client=redis_client)
    await sessions.create_session(app_name="app", user_id="u", session_id="s1")
    await store.create(record("e-1"))
    await sessions.delete_session(app_name="app", user_id="u", session_id="s1")
    await sessions.create_session(app_name="app", user_id="u", session_id="s1")  # the id again
    assert (await store.list_invocations(invocation_query("app", user_id="u", session_id="s1"))).records == []
    assert [r.invocation_id for r in (await store.list_invocations(invocation_query("app"))).records] == ["e-1"]
