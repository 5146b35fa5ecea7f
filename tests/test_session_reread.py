"""``reread_session``: a drain's next item reads only what was appended since its last read."""

from __future__ import annotations

from google.genai import types

from orchestrator import Event, EventActions
from orchestrator.sessions import RedisSessionService


def said(text: str, **delta) -> Event:
    return Event(author="user", invocation_id="e-1",
                 content=types.Content(role="user", parts=[types.Part(text=text)]),
                 actions=EventActions(state_delta=delta))


async def test_reread_sees_new_events_and_state_and_equals_a_full_read(redis_client):
    sessions = RedisSessionService(client=redis_client)
    session = await sessions.create_session(app_name="a", user_id="u", session_id="s")
    for i in range(3):
        await sessions.append_event(session, said(f"old {i}"))
    earlier = await sessions.get_session(app_name="a", user_id="u", session_id="s")

    writer = await sessions.get_session(app_name="a", user_id="u", session_id="s")
    await sessions.append_event(writer, said("new", **{"k": 1, "app:banner": "hi"}))
    other = await sessions.create_session(app_name="a", user_id="u", session_id="t")
    await sessions.append_event(other, said("elsewhere", **{"user:lang": "nb"}))

    reread = await sessions.reread_session(earlier)
    full = await sessions.get_session(app_name="a", user_id="u", session_id="s")
    assert reread is not None and full is not None
    assert [e.content.parts[0].text for e in reread.events] == ["old 0", "old 1", "old 2", "new"]
    assert reread.model_dump() == full.model_dump()
    assert reread.state == {"k": 1, "app:banner": "hi", "user:lang": "nb"}
    assert len(earlier.events) == 3  # the earlier copy is left as it was


async def test_reread_of_a_session_deleted_and_made_again_reads_it_whole(redis_client):
    sessions = RedisSessionService(client=redis_client)
    session = await sessions.create_session(app_name="a", user_id="u", session_id="s")
    await sessions.append_event(session, said("first life"))
    earlier = await sessions.get_session(app_name="a", user_id="u", session_id="s")

    await sessions.delete_session(app_name="a", user_id="u", session_id="s")
    again = await sessions.create_session(app_name="a", user_id="u", session_id="s")
    await sessions.append_event(again, said("second life, one"))
    await sessions.append_event(again, said("second life, two"))

    reread = await sessions.reread_session(earlier)
    assert reread is not None
    assert [e.content.parts[0].text for e in reread.events] == ["second life, one", "second life, two"]

    await sessions.delete_session(app_name="a", user_id="u", session_id="s")
    assert await sessions.reread_session(earlier) is None
