"""RedisSessionService beyond the shared contract (tests/test_sessions.py runs that too).

Everything here runs against a real redis-server (tests/support/redis_server.py): append
cost, idempotency and state scoping across processes, atomicity, fencing, JSON values.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis.asyncio as aioredis
from google.genai import types
from redis.exceptions import ResponseError

from orchestrator import Event, EventActions, InMemorySessionService, platform
from orchestrator.backends.redis import keys as redis_keys
from orchestrator.backends.redis.jobs import PublishOnce, job_publish
from orchestrator.backends.redis.session_writer import Mirror
from orchestrator.distributed.transport import CommitDispatch, attach_commit_dispatch
from orchestrator.errors import (
    AdkCeleryError,
    AlreadyAnsweredError,
    AlreadyExistsError,
    SessionNotFoundError,
    StaleSessionError,
)
from orchestrator.sessions import GetSessionConfig, RedisSessionService

APP, USER = "app", "u1"


def delta_event(delta: dict, **kwargs: Any) -> Event:
    return Event(
        author="agent", invocation_id="e-1", actions=EventActions(state_delta=delta), **kwargs
    )


class Counter:
    """Counts the packets a client sends to Redis: one per command or per pipeline."""

    def __init__(self) -> None:
        self.sends = 0


def counting_client(url: str, counter: Counter) -> aioredis.Redis:
    class CountingConnection(aioredis.Connection):
        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            counter.sends += 1
            await super().send_packed_command(command, check_health)

    pool = aioredis.ConnectionPool.from_url(
        url, connection_class=CountingConnection, decode_responses=True
    )
    return aioredis.Redis(connection_pool=pool)


async def snapshot(client: aioredis.Redis) -> dict[str, bytes | None]:
    """Every key of the database with its serialised value (DUMP)."""
    return {key: await client.dump(key) for key in sorted(await client.keys("*"))}


async def command_calls(client: aioredis.Redis) -> dict[str, int]:
    """Server-side command counts since CONFIG RESETSTAT (commands run by scripts included)."""
    stats = await client.info("commandstats")
    return {
        name: values["calls"]
        for name, values in stats.items()
        if name not in ("cmdstat_config|resetstat", "cmdstat_info")
    }


@pytest.fixture
def service(redis_client: aioredis.Redis) -> RedisSessionService:
    return RedisSessionService(client=redis_client)


@pytest.fixture
async def second_service(redis_url: str, redis_client: aioredis.Redis):
    """Another service with its own connection: what a second process would see."""
    other = RedisSessionService(redis_url)
    yield other
    await other.aclose()


# --- cost -----------------------------------------------------------------------------------


async def test_append_cost_does_not_grow_with_history(redis_url, redis_client):
    counter = Counter()
    client = counting_client(redis_url, counter)
    service = RedisSessionService(client=client)
    try:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        for i in range(10):  # also loads the script into the server
            await service.append_event(session, delta_event({"i": i, "app:a": i, "user:u": i}))

        async def cost_of_one_append() -> tuple[int, dict[str, int]]:
            await redis_client.config_resetstat()
            before = counter.sends
            await service.append_event(session, delta_event({"i": -1, "app:a": 1, "user:u": 2}))
            return counter.sends - before, await command_calls(redis_client)

        trips_at_10, commands_at_10 = await cost_of_one_append()

        # Grow the history to 10,000 events (bulk-loaded: this test is about the 10,001st).
        events_key = redis_keys.session_events(APP, USER, "s")
        ids_key = redis_keys.session_event_ids(APP, USER, "s")
        filler = [delta_event({"i": i}, content=types.Content(role="model", parts=[
            types.Part(text=f"history {i}")])) for i in range(10_000 - 11)]
        async with redis_client.pipeline(transaction=False) as pipe:
            pipe.rpush(events_key, *[e.to_json() for e in filler])
            pipe.sadd(ids_key, *[e.id for e in filler])
            await pipe.execute()
        assert await redis_client.llen(events_key) == 10_000

        trips_at_10k, commands_at_10k = await cost_of_one_append()

        assert trips_at_10 == trips_at_10k == 1  # one EVALSHA, nothing else
        assert commands_at_10 == commands_at_10k  # identical work inside Redis too
        assert commands_at_10["cmdstat_evalsha"] == 1
        assert commands_at_10["cmdstat_rpush"] == 1
        assert "cmdstat_lrange" not in commands_at_10 and "cmdstat_hgetall" not in commands_at_10
        assert await redis_client.llen(events_key) == 10_001

        # Reading the session is one round trip too, and num_recent_events reads only a tail.
        before = counter.sends
        tail = await service.get_session(
            app_name=APP, user_id=USER, session_id="s",
            config=GetSessionConfig(num_recent_events=3),
        )
        assert counter.sends - before == 1
        assert tail is not None and len(tail.events) == 3
        assert tail.events[-1].actions.state_delta == {"i": -1, "app:a": 1, "user:u": 2}
        assert tail.state == {"i": -1, "app:a": 1, "user:u": 2}
    finally:
        await client.aclose()


async def test_cost_of_state_writes_is_the_size_of_the_delta(service, redis_client):
    """A big session state is never rewritten: an append sets only the fields of its delta."""
    session = await service.create_session(
        app_name=APP, user_id=USER, state={f"k{i}": "x" * 100 for i in range(2_000)}
    )
    await service.append_event(session, delta_event({"warm": 1}))
    await redis_client.config_resetstat()
    await service.append_event(session, delta_event({"k1": "changed", "new": [1, 2]}))
    calls = await command_calls(redis_client)
    assert calls["cmdstat_hset"] == 2  # the session-state fields, then last_update_time
    state_key = redis_keys.session_state(APP, USER, session.id)
    assert await redis_client.hget(state_key, "k1") == '"changed"'
    assert await redis_client.hget(state_key, "new") == "[1,2]"
    assert await redis_client.hlen(state_key) == 2_002


async def test_large_delta_is_written_in_chunks(service):
    session = await service.create_session(app_name=APP, user_id=USER)
    big = {f"k{i}": i for i in range(5_000)} | {f"user:u{i}": i for i in range(3_000)}
    await service.append_event(session, delta_event(big))
    reloaded = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert reloaded is not None and reloaded.state == big


# --- two processes ------------------------------------------------------------------------


async def test_repeated_event_id_is_applied_once_across_instances(service, second_service):
    a = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await service.append_event(a, delta_event({"n": 0}))
    b = await second_service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert b is not None and len(b.events) == 1

    event = delta_event({"n": 1, "temp:t": "x"})
    await service.append_event(a, event)
    redelivered = Event.from_wire(event.to_json())  # what another process would hold
    assert redelivered.id == event.id
    await second_service.append_event(b, redelivered)
    assert len(b.events) == 2 and b.state == {"n": 1}  # applied once: b now holds it too
    await second_service.append_event(b, Event.from_wire(event.to_json()))
    assert len(b.events) == 2 and b.state == {"n": 1}  # and never twice

    # Both racing to append one new event: exactly one copy is stored.
    racing = delta_event({"n": 2})
    await asyncio.gather(
        service.append_event(a, racing),
        second_service.append_event(b, Event.from_wire(racing.to_json())),
    )
    stored = await second_service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert stored is not None
    assert [e.actions.state_delta for e in stored.events] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert stored.state == {"n": 2}


async def test_state_scoping_across_instances(service, second_service):
    s1 = await service.create_session(
        app_name=APP, user_id="u1", state={"app:a": 1, "user:b": 2, "temp:c": 3, "d": 4}
    )
    # Another process sees app/user state in new sessions, and the session's own state.
    s2 = await second_service.create_session(app_name=APP, user_id="u1")
    assert s2.state == {"app:a": 1, "user:b": 2}
    other_user = await second_service.create_session(app_name=APP, user_id="u2")
    assert other_user.state == {"app:a": 1}

    await second_service.append_event(s2, delta_event({"app:x": "ax", "user:y": "uy", "z": 1}))
    reloaded = await service.get_session(app_name=APP, user_id="u1", session_id=s1.id)
    assert reloaded is not None
    assert reloaded.state == {"app:a": 1, "app:x": "ax", "user:b": 2, "user:y": "uy", "d": 4}
    u2 = await service.get_session(app_name=APP, user_id="u2", session_id=other_user.id)
    assert u2 is not None and u2.state == {"app:a": 1, "app:x": "ax"}
    assert await service.get_user_state(app_name=APP, user_id="u1") == {"b": 2, "y": "uy"}
    assert await service.get_user_state(app_name=APP, user_id="u2") == {}
    assert await service.get_user_state(app_name="other", user_id="u1") == {}

    listed = await service.list_sessions(app_name=APP)
    assert [s.id for s in listed.sessions] == [s1.id, other_user.id, s2.id]
    assert [s.state for s in listed.sessions] == [
        {"app:a": 1, "app:x": "ax", "user:b": 2, "user:y": "uy", "d": 4},
        {"app:a": 1, "app:x": "ax"},
        {"app:a": 1, "app:x": "ax", "user:b": 2, "user:y": "uy", "z": 1},
    ]
    with pytest.raises(AlreadyExistsError):
        await second_service.create_session(app_name=APP, user_id="u1", session_id=s1.id)


async def test_list_order_matches_in_memory_when_times_tie(redis_client):
    platform.set_time_provider(lambda: 100.0)
    try:
        orders = []
        for service in (InMemorySessionService(), RedisSessionService(client=redis_client)):
            made = {}
            for user, sid in [("u1", "b"), ("u1", "a"), ("u1", "c")]:
                made[sid] = await service.create_session(app_name=APP, user_id=user, session_id=sid)
            await service.append_event(made["b"], delta_event({"k": 1}, timestamp=101.0))
            listed = await service.list_sessions(app_name=APP, user_id="u1")
            orders.append([s.id for s in listed.sessions])
        assert orders[0] == orders[1] == ["a", "c", "b"]
    finally:
        platform.set_time_provider(time.time)


# --- atomicity ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda sid: redis_keys.user_state(APP, USER),
        lambda sid: redis_keys.app_state(APP),
        lambda sid: redis_keys.app_sessions(APP),
        lambda sid: redis_keys.session_events(APP, USER, sid),
    ],
    ids=["user-state", "app-state", "app-index", "events"],
)
async def test_failed_append_script_writes_nothing(service, redis_client, corrupt):
    session = await service.create_session(app_name=APP, user_id=USER, state={"k": 0})
    await service.append_event(session, delta_event({"k": 1, "app:a": 1, "user:b": 1}))
    key = corrupt(session.id)
    await redis_client.delete(key)
    await redis_client.set(key, "not the expected type")  # every write after this one fails
    before = await snapshot(redis_client)
    event = delta_event({"k": 2, "app:a": 2, "user:b": 2, "temp:t": 2})

    with pytest.raises(ResponseError, match="nothing was written"):
        await service.append_event(session, event)

    assert await snapshot(redis_client) == before
    assert len(session.events) == 1 and session.state["k"] == 1  # caller's copy untouched
    assert "temp:t" in event.actions.state_delta  # the event was not modified either


async def test_append_to_deleted_session_writes_nothing(service, redis_client):
    session = await service.create_session(app_name=APP, user_id=USER)
    await service.delete_session(app_name=APP, user_id=USER, session_id=session.id)
    before = await snapshot(redis_client)
    with pytest.raises(SessionNotFoundError, match=session.id):
        await service.append_event(session, delta_event({"app:a": 1, "k": 1}))
    assert await snapshot(redis_client) == before  # no index entry or state resurrected


async def test_delete_removes_every_key_of_the_session(service, redis_client):
    session = await service.create_session(
        app_name=APP, user_id=USER, session_id="gone", state={"app:a": 1, "user:b": 2, "c": 3}
    )
    keep = await service.create_session(app_name=APP, user_id=USER, session_id="kept")
    await service.append_event(session, delta_event({"d": 4}))
    await service.delete_session(app_name=APP, user_id=USER, session_id="gone")

    remaining = set(await redis_client.keys("*"))
    assert not [k for k in remaining if "{app:u1:gone}" in k]
    assert await redis_client.zrange(redis_keys.user_sessions(APP, USER), 0, -1) == ["kept"]
    assert await redis_client.zrange(redis_keys.app_sessions(APP), 0, -1) == ['["u1","kept"]']
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"b": 2}  # shared
    assert [s.id for s in (await service.list_sessions(app_name=APP)).sessions] == [keep.id]
    # The id can be used again, and starts empty.
    again = await service.create_session(app_name=APP, user_id=USER, session_id="gone")
    assert again.state == {"app:a": 1, "user:b": 2}
    reloaded = await service.get_session(app_name=APP, user_id=USER, session_id="gone")
    assert reloaded is not None and reloaded.events == []


# --- fencing --------------------------------------------------------------------------------


async def test_fencing_token_is_checked_at_append(service, redis_client):
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    lease = redis_keys.session_lease(APP, USER, "s")
    await redis_client.set(lease, "7")

    holder = service.leased_writer(lease, "7")
    await holder.append_event(session, delta_event({"k": 1}))  # holder: accepted

    await redis_client.set(lease, "8")  # another orchestrator took the session over
    before = await snapshot(redis_client)
    event = delta_event({"k": 2, "temp:t": 1})
    with pytest.raises(StaleSessionError, match="session lease was lost") as excinfo:
        await holder.append_event(session, event)
    assert isinstance(excinfo.value, ValueError) and isinstance(excinfo.value, AdkCeleryError)
    assert "held by another owner" in str(excinfo.value)
    assert await snapshot(redis_client) == before
    assert [e.actions.state_delta for e in session.events] == [{"k": 1}]
    assert "temp:t" in event.actions.state_delta

    # Expired lease (gone from Redis): stale as well.
    await redis_client.pexpireat(lease, 1)
    assert await redis_client.exists(lease) == 0
    with pytest.raises(StaleSessionError, match="expired"):
        await service.leased_writer(lease, "8").append_event(session, delta_event({"k": 3}))
    assert await snapshot(redis_client) == {k: v for k, v in before.items() if k != lease}

    # The service's own appends are not fenced.
    await service.append_event(session, delta_event({"k": 4}))
    stored = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert stored is not None
    assert [e.actions.state_delta for e in stored.events] == [{"k": 1}, {"k": 4}]


async def test_a_status_handed_to_the_mirror_lands_with_the_next_append_only(service, redis_client):
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    lease, stream = redis_keys.session_lease(APP, USER, "s"), "adk:test:stream"
    record_key, statuses = "adk:test:record", "adk:test:statuses"
    await redis_client.set(lease, "8")
    mirror = Mirror(stream, 100, 60)
    mirror.with_next_append(record_key, statuses, '{"status": "running"}', "running")
    with pytest.raises(StaleSessionError):
        await service.leased_writer(lease, "7", mirror).append_event(session, delta_event({"k": 1}))
    assert await redis_client.exists(record_key, stream, statuses) == 0  # refused: nothing
    writer = service.leased_writer(lease, "8", mirror)
    await writer.append_event(session, delta_event({"k": 2}))
    await writer.append_event(session, delta_event({"k": 3}))
    assert await redis_client.hget(record_key, "record") == '{"status": "running"}'
    entries = [fields for _, fields in await redis_client.xrange(stream)]
    assert [(f["kind"], f.get("status")) for f in entries] == [
        ("status", "running"), ("event", None), ("event", None)]  # written once, and first
    # The status-only stream (what waiting clients read) has the status and nothing else.
    assert [f["status"] for _, f in await redis_client.xrange(statuses)] == ["running"]
    assert 0 < await redis_client.ttl(record_key) <= 60
    assert 0 < await redis_client.ttl(statuses) <= 60


def _answer(call_id: str, **actions: Any) -> Event:
    return Event(author="agent", invocation_id="e-1", actions=EventActions(**actions),
                 content=types.Content(role="user", parts=[types.Part(function_response=(
                     types.FunctionResponse(id=call_id, name="tool", response={"ok": True})))]))


async def test_a_leased_writer_never_appends_a_second_answer_to_a_call(service, redis_client):
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    lease = redis_keys.session_lease(APP, USER, "s")
    await redis_client.set(lease, "7")
    writer = service.leased_writer(lease, "7")
    # A "confirmation required" answer is provisional: the confirmed call is answered later.
    await writer.append_event(session, _answer("call-1", requested_tool_confirmations={
        "call-1": {"hint": "sure?"}}))
    first = _answer("call-1")
    await writer.append_event(session, first)
    await writer.append_event(session, first)  # the same event again: ignored, no error
    before = await snapshot(redis_client)
    with pytest.raises(AlreadyAnsweredError, match="call-1"):
        await writer.append_event(session, _answer("call-1"))
    assert await snapshot(redis_client) == before  # nothing written
    assert len(session.events) == 2
    # Plain appends (in-process use, as google-adk's services) are not guarded.
    await service.append_event(session, _answer("call-1"))
    assert len(session.events) == 3
    await service.delete_session(app_name=APP, user_id=USER, session_id="s")
    assert not await redis_client.exists(redis_keys.session_answered(APP, USER, "s"))


def _call_with_job(call_id: str, state_seen: list[dict[str, Any]]) -> tuple[Event, CommitDispatch]:
    """A call event whose job (a message pushed on the list ``q``) goes out with its commit."""
    event = Event(author="agent", invocation_id="e-1", long_running_tool_ids={call_id},
                  actions=EventActions(state_delta={"seen": 1}),
                  content=types.Content(role="model", parts=[types.Part(function_call=(
                      types.FunctionCall(id=call_id, name="tool", args={})))]))

    def build(state: dict[str, Any]) -> list[tuple[str, Any]]:
        state_seen.append(state)
        return [(call_id, PublishOnce(jobs="adk:test:jobs", watch="adk:test:watch", job=job_publish(
            call_id=call_id, attempt=1, dispatch={"queue": "q"}, ttl=60, member=call_id,
            look_after=1.0, timeout=None, digest="d",
            commands=[("lpush", ("q", f"job of {call_id}"))]).flat()))]

    dispatch = CommitDispatch(build)
    attach_commit_dispatch(event, dispatch)
    return event, dispatch


async def test_a_call_and_its_job_are_one_commit(service, redis_client):
    """A leased append sends the jobs attached to its event in the same script: never one
    without the other, and once, however often the append is tried."""
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s",
                                           state={"before": 0})
    lease = redis_keys.session_lease(APP, USER, "s")
    await redis_client.set(lease, "8")
    states: list[dict[str, Any]] = []
    event, dispatch = _call_with_job("call-1", states)
    with pytest.raises(StaleSessionError):  # a writer that lost its lease sends nothing
        await service.leased_writer(lease, "7").append_event(session, event)
    assert await redis_client.llen("q") == 0 and not await redis_client.exists("adk:test:jobs")
    assert dispatch.published == set()

    writer = service.leased_writer(lease, "8")
    await writer.append_event(session, event)
    assert await redis_client.lrange("q", 0, -1) == ["job of call-1"]
    assert await redis_client.hget("adk:test:jobs", "a:call-1") == "1"
    assert dispatch.published == {"call-1"}
    assert states[-1] == {"before": 0, "seen": 1}  # the job reads the state the call leaves
    await writer.append_event(session, event)  # tried again (a lost reply): sent once
    assert await redis_client.llen("q") == 1
    # Plain appends (in-process use) send nothing.
    other, plain = _call_with_job("call-2", states)
    await service.append_event(session, other)
    assert await redis_client.llen("q") == 1 and plain.published == set()


async def test_a_writer_fences_only_its_own_appends(service, redis_client):
    """A leased writer's fence does not apply to other appends running at the same time."""
    a = await service.create_session(app_name=APP, user_id=USER, session_id="a")
    b = await service.create_session(app_name=APP, user_id=USER, session_id="b")
    lease_a = redis_keys.session_lease(APP, USER, "a")
    await redis_client.set(lease_a, "other-owner")

    async def fenced_append() -> None:
        await service.leased_writer(lease_a, "mine").append_event(a, delta_event({"x": 1}))

    async def unfenced_append() -> None:
        await service.append_event(b, delta_event({"y": 1}))

    results = await asyncio.gather(fenced_append(), unfenced_append(), return_exceptions=True)
    assert isinstance(results[0], StaleSessionError) and results[1] is None


# --- values ---------------------------------------------------------------------------------


async def test_non_json_state_value_is_rejected_naming_the_key(service, redis_client):
    session = await service.create_session(app_name=APP, user_id=USER)
    before = await snapshot(redis_client)
    with pytest.raises(TypeError, match="'user:bad'.*not JSON-serialisable"):
        await service.append_event(session, delta_event({"ok": 1, "user:bad": object()}))
    with pytest.raises(TypeError, match="'s'"):
        await service.append_event(session, delta_event({"s": {1, 2}}))
    with pytest.raises(ValueError, match="'nan'"):
        await service.append_event(session, delta_event({"nan": float("nan")}))
    assert await snapshot(redis_client) == before
    assert session.events == [] and session.state == {}

    with pytest.raises(TypeError, match="'app:when'"):
        await service.create_session(app_name=APP, user_id=USER, state={"app:when": object()})
    assert await snapshot(redis_client) == before

    # temp: values are never stored, so they need not be JSON.
    marker = object()
    await service.append_event(session, delta_event({"temp:obj": marker, "k": 1}))
    assert session.state["temp:obj"] is marker


async def test_values_round_trip_through_json(service):
    value = {"text": "héllo ✓", "n": 1, "f": 1.5, "none": None, "list": [1, {"a": [True]}]}
    session = await service.create_session(app_name=APP, user_id=USER, state={"v": value})
    assert session.state == {"v": value}
    await service.append_event(session, delta_event({"w": value, "cleared": None}))
    reloaded = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert reloaded is not None
    assert reloaded.state == {"v": value, "w": value, "cleared": None}


async def test_stored_event_round_trips_and_has_no_temp_keys(service, redis_client):
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    event = Event(
        author="model", invocation_id="e-9", branch="root.sub",
        content=types.Content(role="model", parts=[types.Part(
            function_call=types.FunctionCall(id="c1", name="tool", args={"q": "x"}))]),
        long_running_tool_ids={"c1"},
        actions=EventActions(state_delta={"k": 1, "temp:t": 2}, artifact_delta={"f": 0}),
    )
    await service.append_event(session, event)
    raw = await redis_client.lrange(redis_keys.session_events(APP, USER, "s"), 0, -1)
    assert len(raw) == 1 and "temp:t" not in raw[0]
    assert Event.from_wire(raw[0]) == event  # the caller's event had temp: removed as well
    reloaded = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert reloaded is not None and reloaded.events == [event]
    assert reloaded.last_update_time == event.timestamp


async def test_partial_events_cost_nothing(redis_url, redis_client):
    counter = Counter()
    client = counting_client(redis_url, counter)
    service = RedisSessionService(client=client)
    try:
        session = await service.create_session(app_name=APP, user_id=USER)
        before, sends = await snapshot(redis_client), counter.sends
        partial = delta_event({"k": 1, "temp:t": 1}, partial=True)
        assert await service.append_event(session, partial) is partial
        assert counter.sends == sends  # not even a round trip
        assert await snapshot(redis_client) == before
        assert session.events == [] and session.state == {}
        assert partial.actions.state_delta == {"k": 1, "temp:t": 1}
    finally:
        await client.aclose()


# --- construction -----------------------------------------------------------------------------


async def test_owned_and_borrowed_clients(redis_url, redis_client, monkeypatch):
    owned = RedisSessionService(redis_url)
    created = await owned.create_session(app_name=APP, user_id=USER, session_id="x")
    await owned.aclose()
    borrowed = RedisSessionService(client=redis_client)
    assert await borrowed.get_session(app_name=APP, user_id=USER, session_id="x") == created
    await borrowed.aclose()
    assert await redis_client.ping()  # a borrowed client is left open

    with pytest.raises(ValueError, match="either"):
        RedisSessionService(redis_url, client=redis_client)

    monkeypatch.setenv("ADK_CELERY_REDIS_URL", redis_url)  # never read below a process role
    with pytest.raises(ValueError, match="pass redis_url=... or client=..."):
        RedisSessionService()


# --- key layout -----------------------------------------------------------------------------


def hash_tag(key: str) -> str:
    return key[key.index("{") + 1: key.index("}", key.index("{"))]


def test_key_layout_prefix_and_hash_tags():
    session_keys = [
        *redis_keys.session_storage_keys("a", "u", "s"),
        redis_keys.session_lease("a", "u", "s"),
        redis_keys.session_queue("a", "u", "s"),
        redis_keys.session_processing("a", "u", "s"),
        redis_keys.fence_counter("a", "u", "s"),
        redis_keys.artifact_names("a", "u", "s"),
        redis_keys.artifact_parts("a", "u", "s", "f.txt"),
    ]
    invocation_keys = [
        redis_keys.invocation("a", "e-1"),
        redis_keys.invocation_results("a", "e-1"),
        redis_keys.cancel_flag("a", "e-1"),
        redis_keys.invocation_stream("a", "e-1"),
    ]
    others = [
        redis_keys.user_sessions("a", "u"), redis_keys.app_sessions("a"),
        redis_keys.app_state("a"), redis_keys.user_state("a", "u"),
        redis_keys.app_session_seq("a"), redis_keys.artifact_meta("a", "u", None, "user:f"),
    ]
    every = session_keys + invocation_keys + others
    assert all(k.startswith("adk:") for k in every)
    assert len(set(every)) == len(every)
    assert {hash_tag(k) for k in session_keys} == {"a:u:s"}
    assert {hash_tag(k) for k in invocation_keys} == {"a:e-1"}


def test_ids_are_escaped_so_keys_never_collide():
    assert redis_keys.session("a:b", "c", "d") != redis_keys.session("a", "b:c", "d")
    assert redis_keys.user_state("a", "b:c") != redis_keys.user_state("a:b", "c")
    weird = redis_keys.session_events("{app}", "u%}", "s:1")
    assert hash_tag(weird) == "%7Bapp%7D:u%25%7D:s%3A1"
    assert redis_keys.artifact_parts("a", "u", None, "user:x") != redis_keys.artifact_parts(
        "a", "u", "user", "x"
    )


async def test_ids_with_special_characters(service):
    app, user, sid = "my:app{1}", "us%er}", "s:{x}"
    session = await service.create_session(
        app_name=app, user_id=user, session_id=sid, state={"app:k": 1, "user:k": 2}
    )
    await service.append_event(session, delta_event({"v": 1}))
    reloaded = await service.get_session(app_name=app, user_id=user, session_id=sid)
    assert reloaded is not None and reloaded.state == {"app:k": 1, "user:k": 2, "v": 1}
    listed = await service.list_sessions(app_name=app)
    assert [(s.user_id, s.id) for s in listed.sessions] == [(user, sid)]


async def test_a_deleted_session_leaves_no_key_for_ever(redis_client):
    # Its fencing counter (made by the first lease taken on it) used to stay without expiry.
    from orchestrator.backends.redis.session_queue import RedisSessionQueue

    service = RedisSessionService(client=redis_client)
    session = await service.create_session(app_name="app", user_id="u")
    key = ("app", "u", session.id)
    await RedisSessionQueue(redis_client).take(key)
    await service.delete_session(app_name="app", user_id="u", session_id=session.id)
    prefix = redis_keys.session(*key)
    left = [k async for k in redis_client.scan_iter(match=prefix.replace("{", "[{]") + "*")]
    assert left, "the lease's fencing counter exists"
    assert all([await redis_client.ttl(k) > 0 for k in left]), left
