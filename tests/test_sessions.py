"""Session-service contract (adk-reference §4), written against a fixture so other stores reuse it."""

from __future__ import annotations

import pytest
from google.genai import types

from orchestrator import Event, EventActions, InMemorySessionService, RedisSessionService
from orchestrator.backends.redis import keys as redis_keys
from orchestrator.errors import AlreadyAnsweredError, AlreadyExistsError, SessionNotFoundError
from orchestrator.sessions import GetSessionConfig


@pytest.fixture(params=["in-memory", "redis"])
def service(request):
    if request.param == "redis":
        return RedisSessionService(client=request.getfixturevalue("redis_client"))
    return InMemorySessionService()


async def test_a_session_id_is_read_and_deleted_as_it_was_created_stripped(service):
    await service.create_session(app_name="app", user_id="u1", session_id=" s2 ")
    found = await service.get_session(app_name="app", user_id="u1", session_id=" s2 ")
    assert found is not None and found.id == "s2"
    assert await service.get_session(app_name="app", user_id="u1", session_id=None) is None
    await service.delete_session(app_name="app", user_id="u1", session_id="s2  ")
    assert await service.get_session(app_name="app", user_id="u1", session_id="s2") is None


async def test_sessions_updated_at_the_same_time_are_listed_by_user_then_id(service, monkeypatch):
    from orchestrator import platform

    monkeypatch.setattr(platform, "get_time", lambda: 1_700_000_000.0)
    for user, sid in (("u2", "b"), ("u1", "z"), ("u2", "a"), ("u1", "c")):
        await service.create_session(app_name="app", user_id=user, session_id=sid)
    listed = await service.list_sessions(app_name="app")
    assert [(s.user_id, s.id) for s in listed.sessions] == [
        ("u1", "c"), ("u1", "z"), ("u2", "a"), ("u2", "b")]


def delta_event(delta: dict, **kwargs) -> Event:
    return Event(author="agent", invocation_id="e-1", actions=EventActions(state_delta=delta), **kwargs)


async def test_create_get_list_delete(service):
    a = await service.create_session(app_name="app", user_id="u1", session_id=" s1 ")
    assert a.id == "s1"
    generated = await service.create_session(app_name="app", user_id="u2")
    assert len(generated.id) == 36
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name="app", user_id="u1", session_id="s1")
    assert (await service.get_session(app_name="app", user_id="u1", session_id="missing")) is None

    await service.append_event(a, delta_event({"k": 1}))
    listed = await service.list_sessions(app_name="app", user_id="u1")
    assert [s.id for s in listed.sessions] == ["s1"]
    assert listed.sessions[0].events == [] and listed.sessions[0].state == {"k": 1}
    everyone = await service.list_sessions(app_name="app")
    assert [s.id for s in everyone.sessions] == [generated.id, "s1"]  # oldest update first

    await service.delete_session(app_name="app", user_id="u1", session_id="s1")
    await service.delete_session(app_name="app", user_id="u1", session_id="s1")  # no-op
    assert await service.get_session(app_name="app", user_id="u1", session_id="s1") is None
    with pytest.raises(SessionNotFoundError):
        await service.append_event(a, delta_event({"k": 2}))


async def test_state_scoping_app_user_temp(service):
    s = await service.create_session(
        app_name="app", user_id="u1", state={"app:a": 1, "user:b": 2, "temp:c": 3, "d": 4}
    )
    assert s.state == {"app:a": 1, "user:b": 2, "d": 4}

    event = delta_event({"app:x": "ax", "user:y": "uy", "temp:z": "tz", "w": "sw"})
    await service.append_event(s, event)

    assert s.state["temp:z"] == "tz"  # visible for the rest of the invocation
    assert "temp:z" not in event.actions.state_delta  # never persisted
    reloaded = await service.get_session(app_name="app", user_id="u1", session_id=s.id)
    assert reloaded.state == {"app:a": 1, "app:x": "ax", "user:b": 2, "user:y": "uy", "d": 4, "w": "sw"}
    assert reloaded.events[0].actions.state_delta == {"app:x": "ax", "user:y": "uy", "w": "sw"}
    same_user = await service.create_session(app_name="app", user_id="u1")
    assert same_user.state == {"app:a": 1, "app:x": "ax", "user:b": 2, "user:y": "uy"}
    other_user = await service.create_session(app_name="app", user_id="u2")
    assert other_user.state == {"app:a": 1, "app:x": "ax"}
    assert await service.get_user_state(app_name="app", user_id="u1") == {"b": 2, "y": "uy"}


async def test_partial_events_are_neither_stored_nor_applied(service):
    s = await service.create_session(app_name="app", user_id="u")
    await service.append_event(s, delta_event({"k": 1}, partial=True))
    reloaded = await service.get_session(app_name="app", user_id="u", session_id=s.id)
    assert reloaded.events == [] and reloaded.state == {}


async def test_append_is_idempotent_for_a_repeated_event_id(service):
    s = await service.create_session(app_name="app", user_id="u")
    event = delta_event({"n": 1})
    await service.append_event(s, event)
    await service.append_event(s, event)
    reloaded = await service.get_session(app_name="app", user_id="u", session_id=s.id)
    assert len(reloaded.events) == 1


async def test_get_session_config_filters_events(service):
    s = await service.create_session(app_name="app", user_id="u")
    for i in range(5):
        await service.append_event(s, delta_event({"i": i}, timestamp=100.0 + i))
    get = service.get_session
    recent = await get(app_name="app", user_id="u", session_id=s.id, config=GetSessionConfig(num_recent_events=2))
    assert [e.actions.state_delta["i"] for e in recent.events] == [3, 4]
    none = await get(app_name="app", user_id="u", session_id=s.id, config=GetSessionConfig(num_recent_events=0))
    assert none.events == []
    after = await get(app_name="app", user_id="u", session_id=s.id, config=GetSessionConfig(after_timestamp=102.5))
    assert [e.actions.state_delta["i"] for e in after.events] == [3, 4]
    with pytest.raises(ValueError):
        GetSessionConfig(num_recent_events=-1)


async def test_returned_sessions_are_independent_copies(service):
    s = await service.create_session(app_name="app", user_id="u", state={"nested": {"a": 1}})
    s.state["nested"]["a"] = 99
    reloaded = await service.get_session(app_name="app", user_id="u", session_id=s.id)
    assert reloaded.state == {"nested": {"a": 1}}


def _answer(call_id: str, **actions) -> Event:
    return Event(author="agent", invocation_id="e-1", actions=EventActions(**actions),
                 content=types.Content(role="user", parts=[types.Part(function_response=(
                     types.FunctionResponse(id=call_id, name="tool", response={"ok": True})))]))


async def _answer_once_writer(service, request, session):
    """What an orchestrator commits through: never a second final answer to a call."""
    if isinstance(service, InMemorySessionService):
        return service.answer_once_writer()
    lease = redis_keys.session_lease(session.app_name, session.user_id, session.id)
    await request.getfixturevalue("redis_client").set(lease, "7")
    return service.leased_writer(lease, "7")


async def test_a_guarded_writer_appends_one_final_answer_after_a_provisional_one(service, request):
    session = await service.create_session(app_name="app", user_id="u1", session_id="s")
    writer = await _answer_once_writer(service, request, session)
    # The confirmation gate's answer is provisional: the confirmed call is answered again.
    await writer.append_event(session, _answer("call-1", requested_tool_confirmations={
        "call-1": {"hint": "sure?"}}))
    first = _answer("call-1")
    await writer.append_event(session, first)
    await writer.append_event(session, first)  # the same event again: ignored, no error
    with pytest.raises(AlreadyAnsweredError, match="call-1"):
        await writer.append_event(session, _answer("call-1"))
    stored = await service.get_session(app_name="app", user_id="u1", session_id="s")
    assert [e.id for e in stored.events] == [e.id for e in session.events]
    assert len(session.events) == 2  # nothing of the refused answer, here or stored
    # Plain appends (in-process use, as google-adk's services) are not guarded.
    await service.append_event(session, _answer("call-1"))
    assert len(session.events) == 3
