"""The session cache on real Redis: an orchestrator keeps a session it read only under its byte cap.

Observed as the existing lease tests do (``service.sessions_read``), and by what the next
drain parses: a kept copy means only the events appended since are read and parsed.
"""

from __future__ import annotations

import pytest

from config import Settings
from orchestrator import Event, EventActions, platform
from orchestrator.backends.redis import keys as redis_keys
from orchestrator.backends.redis import session_reads
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.session_queue import RedisSessionQueue
from orchestrator.backends.redis.session_service import RedisSessionService
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.service import InvocationService
from orchestrator.distributed.session_cache import stored_size
from tests.apps import ALL_APPS
from tests.support.events import simplify_all
from workers.runtime import Runtime

CAP = 100_000
"""The byte cap of the orchestrator under test."""


@pytest.fixture
def parts(redis_client):
    sessions = RedisSessionService(client=redis_client)
    store = RedisInvocationStore(redis_client)
    queue = RedisSessionQueue(redis_client, lease_ttl_seconds=30)
    service = InvocationService(AppRegistry(ALL_APPS), session_service=sessions, store=store,
                                queue=queue, session_cache_max_bytes=CAP)
    return sessions, store, service


@pytest.fixture
def parsed(monkeypatch):
    """How many stored events session reads parse (appended to, one figure per read)."""
    counts: list[int] = []
    parse = session_reads._parse_events

    def counting(raw, after_timestamp):
        counts.append(len(raw))
        return parse(raw, after_timestamp)

    monkeypatch.setattr(session_reads, "_parse_events", counting)
    return counts


async def _said(sessions, key, text, **state_delta):
    session = await sessions.get_session(app_name=key[0], user_id=key[1], session_id=key[2])
    await sessions.append_event(session, Event(
        invocation_id="e-x", author="user", content={"role": "user", "parts": [{"text": text}]},
        actions=EventActions(state_delta=state_delta)))


async def _run(service, store, key, text, hinted):
    record = InvocationRecord(
        invocation_id=platform.new_invocation_id(), app_name=key[0], user_id=key[1],
        session_id=key[2], new_message={"role": "user", "parts": [{"text": text}]})
    await service.submit(record)
    assert await service.drain(key, hint=record.invocation_id if hinted else None) is True
    assert (await store.get(key[0], record.invocation_id)).status is InvocationStatus.COMPLETED


async def _state_length(redis_client, key):
    hashes = (redis_keys.session_state(*key), redis_keys.app_state(key[0]),
              redis_keys.user_state(key[0], key[1]))
    stored = [await redis_client.hgetall(h) for h in hashes]
    return sum(len(k) + len(v) for fields in stored for k, v in fields.items())


async def _stored_lengths(redis_client, key):
    return [len(raw) for raw in await redis_client.lrange(redis_keys.session_events(*key), 0, -1)]


@pytest.mark.parametrize("hinted", [True, False], ids=["read-with-the-lease", "read-by-the-service"])
async def test_a_session_under_the_cap_is_kept_and_its_next_read_parses_only_new_events(
    parts, parsed, redis_client, hinted
):
    sessions, store, service = parts
    session = await sessions.create_session(app_name="chat", user_id="u")
    key = ("chat", "u", session.id)
    await _said(sessions, key, "small " * 100, note="n" * 300, **{"user:lang": "nb"})

    await _run(service, store, key, "first", hinted)
    known = service.sessions_read.take(key)
    assert known is not None  # kept: its size is the events' JSON it was read from
    assert simplify_all(known.events) == [("user", "small " * 100)]
    assert stored_size(known).events == sum((await _stored_lengths(redis_client, key))[:1])
    assert stored_size(known).state == await _state_length(redis_client, key)
    service.sessions_read.put(key, known)

    parsed.clear()
    await _run(service, store, key, "second", hinted)
    assert parsed == [2]  # "first" and its reply: the kept copy's event is not read again
    grown = service.sessions_read.take(key)
    assert [e.id for e in grown.events[:1]] == [known.events[0].id]
    assert len(grown.events) == 3  # the size grew with what the read added
    assert stored_size(grown).events == sum((await _stored_lengths(redis_client, key))[:3])


@pytest.mark.parametrize("hinted", [True, False], ids=["read-with-the-lease", "read-by-the-service"])
async def test_a_session_over_the_cap_is_not_kept_and_its_next_read_parses_it_whole(
    parts, parsed, hinted
):
    sessions, store, service = parts
    session = await sessions.create_session(app_name="chat", user_id="u")
    key = ("chat", "u", session.id)
    await _said(sessions, key, "x" * (CAP + 1))  # one event over the orchestrator's cap

    await _run(service, store, key, "first", hinted)
    assert service.sessions_read.take(key) is None and service.sessions_read.bytes == 0

    parsed.clear()
    await _run(service, store, key, "second", hinted)
    assert parsed == [3]  # the whole session again: the big event, "first" and its reply
    assert service.sessions_read.take(key) is None


async def test_a_kept_session_that_grows_past_the_cap_is_dropped(parts, parsed):
    sessions, store, service = parts
    session = await sessions.create_session(app_name="chat", user_id="u")
    key = ("chat", "u", session.id)
    await _said(sessions, key, "small")
    await _run(service, store, key, "first", True)
    known = service.sessions_read.take(key)
    assert known is not None and len(known.events) == 1
    service.sessions_read.put(key, known)
    await _said(sessions, key, "x" * (CAP + 1))  # someone appends a large event

    parsed.clear()
    await _run(service, store, key, "second", True)
    assert parsed == [3]  # read after the kept copy: "first", its reply, the large event
    assert service.sessions_read.take(key) is None  # its size grew past the cap


def test_an_orchestrator_takes_its_cap_from_the_settings_it_starts_with(redis_url):
    runtime = Runtime(Settings(redis_url=redis_url, session_cache_max_bytes=12_345),
                      load_apps=False)
    try:
        services = runtime.run(runtime.services())
        assert services.service.sessions_read.max_bytes == 12_345
    finally:
        runtime.close()
