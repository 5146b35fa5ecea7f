"""Contract tests for memory services (ADK reference §5.2).

Every test goes through the ``memory_service`` fixture, so another implementation (e.g. a
Redis-backed one) is covered by adding it to the fixture's ``params``.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from google.genai import types

from orchestrator.events.event import Event
from orchestrator.memory import (
    BaseMemoryService,
    InMemoryMemoryService,
    MemoryEntry,
    SearchMemoryResponse,
)
from orchestrator.sessions.session import Session

APP = "app"
USER = "u1"


@pytest.fixture(params=[InMemoryMemoryService], ids=lambda cls: cls.__name__)
def memory_service(request: pytest.FixtureRequest) -> BaseMemoryService:
    return request.param()


def event(text: str | None, *, author: str = "user", ts: float = 1_700_000_000.0) -> Event:
    content = None if text is None else types.Content(role="user", parts=[types.Part(text=text)])
    return Event(author=author, content=content, timestamp=ts, invocation_id="e-1")


def session(*events: Event, sid: str = "s1", user: str = USER, app: str = APP) -> Session:
    return Session(id=sid, app_name=app, user_id=user, events=list(events))


def texts(response: SearchMemoryResponse) -> list[str]:
    return [m.content.parts[0].text for m in response.memories]  # type: ignore[index,misc]


async def search(service: BaseMemoryService, query: str, *, user: str = USER, app: str = APP):
    return await service.search_memory(app_name=app, user_id=user, query=query)


async def test_search_ranks_by_match_count_with_stable_ties(memory_service: BaseMemoryService):
    await memory_service.add_session_to_memory(
        session(
            event("the cat sat"),             # cat
            event("no match here"),
            event("A Cat and a DOG!"),         # cat, dog
            event("dog days"),                 # dog
            event("cat, dog & bird"),          # cat, dog, bird
            event("another cat"),              # cat
        )
    )
    result = await search(memory_service, "Bird dog CAT")
    assert isinstance(result, SearchMemoryResponse)
    assert texts(result) == [
        "cat, dog & bird",
        "A Cat and a DOG!",
        "the cat sat",
        "dog days",
        "another cat",
    ]


async def test_word_matching_is_whole_word_and_case_insensitive(
    memory_service: BaseMemoryService,
):
    await memory_service.add_session_to_memory(
        session(event("Concatenate strings"), event("My favourite_colour is BLUE."))
    )
    assert texts(await search(memory_service, "cat")) == []
    assert texts(await search(memory_service, "blue?")) == ["My favourite_colour is BLUE."]
    assert texts(await search(memory_service, "favourite_colour")) == [
        "My favourite_colour is BLUE."
    ]
    assert (await search(memory_service, "")).memories == []
    assert (await search(memory_service, "  ?! ")).memories == []


async def test_search_returns_at_most_ten(memory_service: BaseMemoryService):
    await memory_service.add_session_to_memory(
        session(*[event(f"topic number {i}") for i in range(25)])
    )
    await memory_service.add_session_to_memory(session(event("topic topic best number"), sid="s2"))
    result = await search(memory_service, "topic best")
    assert len(result.memories) == 10
    # The best match comes first even though it was ingested last; ties keep ingestion order.
    assert texts(result) == ["topic topic best number"] + [f"topic number {i}" for i in range(9)]


async def test_entries_carry_event_id_author_and_iso_timestamp(
    memory_service: BaseMemoryService,
):
    ev = event("remember the milk", author="shopper", ts=1_700_000_000.5)
    await memory_service.add_session_to_memory(session(ev))
    (entry,) = (await search(memory_service, "milk")).memories
    assert isinstance(entry, MemoryEntry)
    assert entry.id == ev.id
    assert entry.author == "shopper"
    assert entry.timestamp is not None
    assert datetime.fromisoformat(entry.timestamp).timestamp() == pytest.approx(1_700_000_000.5)
    assert entry.content == ev.content
    assert entry.custom_metadata == {}


async def test_events_without_content_are_skipped(memory_service: BaseMemoryService):
    call = Event(
        author="agent",
        content=types.Content(
            role="model", parts=[types.Part.from_function_call(name="lookup", args={"q": "x"})]
        ),
    )
    await memory_service.add_session_to_memory(
        session(event(None), Event(author="agent", content=types.Content(parts=[])), call)
    )
    assert (await search(memory_service, "lookup x")).memories == []


async def test_users_and_apps_are_isolated(memory_service: BaseMemoryService):
    await memory_service.add_session_to_memory(session(event("secret alpha"), user="u1"))
    await memory_service.add_session_to_memory(session(event("secret beta"), user="u2"))
    await memory_service.add_session_to_memory(session(event("secret gamma"), app="other"))
    assert texts(await search(memory_service, "secret", user="u1")) == ["secret alpha"]
    assert texts(await search(memory_service, "secret", user="u2")) == ["secret beta"]
    assert texts(await search(memory_service, "secret", app="other")) == ["secret gamma"]
    assert (await search(memory_service, "secret", user="u3")).memories == []


async def test_memories_span_the_users_sessions(memory_service: BaseMemoryService):
    await memory_service.add_session_to_memory(session(event("trip to paris"), sid="s1"))
    await memory_service.add_session_to_memory(session(event("paris weather"), sid="s2"))
    assert texts(await search(memory_service, "paris")) == ["trip to paris", "paris weather"]


async def test_re_adding_a_session_does_not_duplicate(memory_service: BaseMemoryService):
    first = event("hello world")
    s = session(first)
    await memory_service.add_session_to_memory(s)
    await memory_service.add_session_to_memory(s)
    assert texts(await search(memory_service, "world")) == ["hello world"]

    # The session grows; only the new event is added.
    s.events.append(event("goodbye world"))
    await memory_service.add_session_to_memory(s)
    await memory_service.add_session_to_memory(s)
    assert texts(await search(memory_service, "world")) == ["hello world", "goodbye world"]

    # Re-sending the same events as a delta does not duplicate either.
    await memory_service.add_events_to_memory(
        app_name=APP, user_id=USER, session_id="s1", events=list(s.events)
    )
    assert len((await search(memory_service, "world")).memories) == 2


async def test_add_events_to_memory(memory_service: BaseMemoryService):
    await memory_service.add_events_to_memory(
        app_name=APP,
        user_id=USER,
        session_id="s1",
        events=[event("likes jazz"), event(None)],
        custom_metadata={"source": "delta"},
    )
    await memory_service.add_events_to_memory(
        app_name=APP, user_id=USER, events=[event("likes jazz and blues")]
    )
    result = await search(memory_service, "jazz blues")
    assert texts(result) == ["likes jazz and blues", "likes jazz"]
    # custom_metadata is not stored, as in google-adk 2.13's InMemoryMemoryService.
    assert [m.custom_metadata for m in result.memories] == [{}, {}]


async def test_delete_memory_is_permanent(memory_service: BaseMemoryService):
    keep, drop = event("keep this fact"), event("drop this fact")
    s = session(keep, drop)
    await memory_service.add_session_to_memory(s)
    await memory_service.delete_memory(app_name=APP, user_id=USER, memory_id=drop.id)
    assert texts(await search(memory_service, "fact")) == ["keep this fact"]

    # Re-ingesting the session or the event does not bring it back.
    await memory_service.add_session_to_memory(s)
    await memory_service.add_events_to_memory(
        app_name=APP, user_id=USER, session_id="s1", events=[drop]
    )
    assert texts(await search(memory_service, "fact")) == ["keep this fact"]

    # Deleting is per user and deleting an unknown id is harmless.
    await memory_service.delete_memory(app_name=APP, user_id="u2", memory_id=keep.id)
    await memory_service.delete_memory(app_name=APP, user_id=USER, memory_id="unknown")
    assert texts(await search(memory_service, "fact")) == ["keep this fact"]


async def test_results_do_not_alias_stored_memories(memory_service: BaseMemoryService):
    ev = event("immutable memory")
    await memory_service.add_session_to_memory(session(ev))
    ev.content.parts[0].text = "changed at the source"  # type: ignore[index,union-attr]
    (entry,) = (await search(memory_service, "immutable")).memories
    entry.content.parts[0].text = "changed in the result"  # type: ignore[index]
    entry.custom_metadata["x"] = 1
    (again,) = (await search(memory_service, "immutable")).memories
    assert again.content.parts[0].text == "immutable memory"  # type: ignore[index]
    assert again.custom_metadata == {}


async def test_optional_methods_default_to_not_implemented():
    class Minimal(BaseMemoryService):
        async def add_session_to_memory(self, session):  # type: ignore[no-untyped-def]
            return None

        async def search_memory(self, *, app_name, user_id, query):  # type: ignore[no-untyped-def]
            return SearchMemoryResponse()

    service = Minimal()
    with pytest.raises(NotImplementedError):
        await service.add_events_to_memory(app_name=APP, user_id=USER, events=[])
    with pytest.raises(NotImplementedError):
        await service.add_memory(app_name=APP, user_id=USER, memories=[])
    with pytest.raises(NotImplementedError):
        await service.delete_memory(app_name=APP, user_id=USER, memory_id="x")


def test_models_defaults():
    entry = MemoryEntry(content=types.Content(parts=[types.Part(text="x")]))
    assert entry.custom_metadata == {} and entry.id is None
    assert entry.author is None and entry.timestamp is None
    assert SearchMemoryResponse().memories == []
