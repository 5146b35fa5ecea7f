"""``InMemoryMemoryService`` against google-adk 2.13's: the same calls find the same memories.

Each scenario runs once on google-adk and once on ``orchestrator`` with the namespaces of
``tests.test_adk_differences`` (plus the framework's ``InMemoryMemoryService``) and returns
what a caller sees of each search: the memories' ids, authors, texts, custom metadata and
the instant of their timestamps (ours are UTC with an offset, google-adk's local time
without one, a kept difference: the instant is what must agree).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from google.genai import types

from tests.test_adk_differences import adk_namespace, our_namespace

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore:.*EXPERIMENTAL.*:UserWarning"
)

APP, USER = "app", "u"

Scenario = Callable[[SimpleNamespace], Coroutine[Any, Any, Any]]
Found = list[tuple[str | None, str | None, str, dict[str, Any], float | None]]


def with_memory(ns: SimpleNamespace, module: str) -> SimpleNamespace:
    """``ns`` plus ``InMemoryMemoryService`` from ``module``."""
    ns.InMemoryMemoryService = importlib.import_module(module).InMemoryMemoryService
    return ns


def assert_same(scenario: Scenario) -> Any:
    """Run ``scenario`` on google-adk, then on orchestrator; both must give the same result."""
    theirs = asyncio.run(scenario(with_memory(adk_namespace(), "google.adk.memory")))
    ours = asyncio.run(scenario(with_memory(our_namespace(), "orchestrator.memory")))
    assert ours == theirs, f"\ngoogle-adk:   {theirs}\norchestrator: {ours}"
    return ours


def event(ns: SimpleNamespace, event_id: str, text: str, *, author: str = "user",
          **fields: Any) -> Any:
    """An event of ``ns``'s framework holding ``text``."""
    return ns.Event(
        id=event_id, invocation_id="e-1", author=author, timestamp=1_700_000_000.5,
        content=types.Content(role="user", parts=[types.Part(text=text)]), **fields,
    )


def session(ns: SimpleNamespace, session_id: str, *events: Any) -> Any:
    """A session of ``ns``'s framework holding ``events``."""
    return ns.Session(id=session_id, app_name=APP, user_id=USER, events=list(events))


async def search(memory: Any, query: str) -> Found:
    """What a caller sees of each memory ``query`` finds, best first."""
    response = await memory.search_memory(app_name=APP, user_id=USER, query=query)
    return [
        (
            entry.id,
            entry.author,
            " ".join(part.text or "" for part in entry.content.parts),
            entry.custom_metadata,
            datetime.fromisoformat(entry.timestamp).timestamp() if entry.timestamp else None,
        )
        for entry in response.memories
    ]


def ids(found: Found) -> list[str | None]:
    """The memory ids of a search's result."""
    return [memory[0] for memory in found]


async def unicode_scenario(ns: SimpleNamespace) -> dict[str, Found]:
    memory = ns.InMemoryMemoryService()
    await memory.add_session_to_memory(session(
        ns, "s1",
        event(ns, "ja", "私はPythonを使う"),
        event(ns, "zh", "東京に行きました"),
        event(ns, "fr", "Café au lait"),
        event(ns, "de", "Straße python3 concatenate"),
    ))
    queries = ["python", "PYTHON", "東京", "使う", "cafe\u0301", "Café", "thon", "cat",
               "python3", "に行き", "straße", "CAFÉ lait"]
    return {query: await search(memory, query) for query in queries}


def test_search_normalises_unicode_and_finds_words_inside_unspaced_scripts() -> None:
    result = assert_same(unicode_scenario)
    assert ids(result["python"]) == ["ja"]
    assert ids(result["東京"]) == ["zh"]
    assert ids(result["cafe\u0301"]) == ["fr"]
    assert result["thon"] == [] and result["cat"] == []


async def readd_scenario(ns: SimpleNamespace) -> dict[str, list[str | None]]:
    memory = ns.InMemoryMemoryService()
    apple, banana = event(ns, "e1", "apple pie"), event(ns, "e2", "banana split")
    await memory.add_session_to_memory(session(ns, "s1", apple, banana))
    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, session_id="s1", events=[event(ns, "e3", "cherry pie")]
    )
    before = ids(await search(memory, "apple banana cherry"))
    # A rewind removed the first and the delta's event: the session is added again without them.
    await memory.add_session_to_memory(session(ns, "s1", banana))
    return {"before": before, "after": ids(await search(memory, "apple banana cherry"))}


def test_re_adding_a_session_that_lost_events_forgets_them() -> None:
    result = assert_same(readd_scenario)
    assert result == {"before": ["e1", "e2", "e3"], "after": ["e2"]}


async def buckets_scenario(ns: SimpleNamespace) -> list[str | None]:
    memory = ns.InMemoryMemoryService()
    await memory.add_session_to_memory(session(ns, "s1", event(ns, "e1", "shared fact")))
    # The same event without a session id (twice: kept once there), with an empty one (the
    # same bucket) and under another session.
    for session_id in (None, None, "", "s2"):
        await memory.add_events_to_memory(
            app_name=APP, user_id=USER, session_id=session_id,
            events=[event(ns, "e1", "shared fact")],
        )
    return ids(await search(memory, "fact"))


def test_the_same_event_under_another_session_is_found_again() -> None:
    assert assert_same(buckets_scenario) == ["e1", "e1", "e1"]


async def metadata_scenario(ns: SimpleNamespace) -> Found:
    memory = ns.InMemoryMemoryService()
    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, session_id="s1", events=[event(ns, "e1", "fresh milk")],
        custom_metadata={"ttl": 5},
    )
    return await search(memory, "milk")


def test_custom_metadata_of_added_events_is_not_stored() -> None:
    (found,) = assert_same(metadata_scenario)
    assert found[3] == {}


async def delete_scenario(ns: SimpleNamespace) -> dict[str, list[str | None]]:
    memory = ns.InMemoryMemoryService()
    await memory.delete_memory(app_name=APP, user_id=USER, memory_id="early")
    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, session_id="s1",
        events=[event(ns, "early", "zebra crossing"), event(ns, "gone", "zebra stripes")],
    )
    await memory.delete_memory(app_name=APP, user_id=USER, memory_id="gone")
    # A forgotten memory stays forgotten when its session is added again.
    await memory.add_session_to_memory(session(
        ns, "s1", event(ns, "early", "zebra crossing"), event(ns, "gone", "zebra stripes"),
    ))
    return {"zebra": ids(await search(memory, "zebra"))}


def test_deleting_an_id_not_yet_remembered_does_not_block_it() -> None:
    assert assert_same(delete_scenario) == {"zebra": ["early"]}


async def partial_scenario(ns: SimpleNamespace) -> Found:
    memory = ns.InMemoryMemoryService()
    await memory.add_session_to_memory(
        session(ns, "s1", event(ns, "p1", "streamed chunk", partial=True))
    )
    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, events=[event(ns, "p2", "another chunk", partial=True)]
    )
    return await search(memory, "chunk")


def test_partial_events_are_remembered() -> None:
    assert ids(assert_same(partial_scenario)) == ["p1", "p2"]


async def empty_author_scenario(ns: SimpleNamespace) -> Found:
    memory = ns.InMemoryMemoryService()
    await memory.add_session_to_memory(
        session(ns, "s1", event(ns, "e1", "anonymous note", author=""))
    )
    return await search(memory, "note")


def test_an_empty_author_stays_empty() -> None:
    (found,) = assert_same(empty_author_scenario)
    assert found[1] == ""
