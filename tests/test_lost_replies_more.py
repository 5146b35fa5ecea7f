"""A save or a publish whose reply is lost runs twice: the user must see one run's work.

As ``tests/test_lost_replies.py``: a proxy (``tests/support/reply_loss.py``) loses the reply
of one script, the client sends it again, and what the user sees is checked against what one
run gives. Each script is loaded before the proxy is armed with its SHA (else the lost reply
is only NOSCRIPT's and the script runs once).
"""

from __future__ import annotations

from typing import Any

import pytest
from google.genai import types

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.artifact_service import RedisArtifactService, SaveVersion
from orchestrator.backends.redis.streams import RedisEventStream
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.events.event import Event
from workers.api.watches import LiveItem

SCOPE: dict[str, Any] = {"app_name": "a", "user_id": "u", "session_id": "s"}


async def test_an_artifact_saved_by_a_lost_reply_is_one_version(proxied, redis_client):
    # Run again, the save appended a second version and replied 1: one save_artifact made
    # versions [0, 1], and the tool's artifact_delta named the duplicate.
    proxy, client = proxied
    artifacts = RedisArtifactService(client=client)
    await redis_client.script_load(artifacts._save_script.script.source)
    proxy.needle = artifacts._save_script.sha.encode()

    version = await artifacts.save_artifact(filename="report.txt", artifact=types.Part(
        text="hello"), custom_metadata={"k": 1}, **SCOPE)
    assert proxy.lost == 1
    assert version == 0
    assert await artifacts.list_versions(filename="report.txt", **SCOPE) == [0]
    [info] = await artifacts.list_artifact_versions(filename="report.txt", **SCOPE)
    assert info.custom_metadata == {"k": 1}  # the save's own id is not shown
    loaded = await artifacts.load_artifact(filename="report.txt", **SCOPE)
    assert loaded is not None and loaded.text == "hello"


async def test_a_save_run_again_after_other_saves_replies_its_own_version(redis_client):
    # Other saves of the file may land between a run whose reply is lost and its second run.
    artifacts = RedisArtifactService(client=redis_client)

    def save(save_id: str, body: str) -> SaveVersion:
        return SaveVersion(
            parts=keys.artifact_parts("a", "u", "s", "f"), meta=keys.artifact_meta("a", "u", "s", "f"),
            names=keys.artifact_names("a", "u", "s"), part_json=f'{{"text":"{body}"}}',
            meta_json=f'{{"saveId":"{save_id}","createTime":1.0}}', save_id=save_id,
            lookback=8, filename="f")

    assert await artifacts._save_script(save("one", "1")) == 0
    assert await artifacts._save_script(save("two", "2")) == 1
    assert await artifacts._save_script(save("one", "1")) == 0  # run again: its version
    assert await artifacts._save_script(save("three", "3")) == 2
    assert await artifacts.list_versions(app_name="a", user_id="u", session_id="s",
                                         filename="f") == [0, 1, 2]


def _record() -> InvocationRecord:
    return InvocationRecord(invocation_id="e-1", app_name="a", user_id="u", session_id="s")


async def test_a_chunk_published_by_a_lost_reply_is_streamed_once(proxied, redis_client):
    # Run again, the MULTI (XADD, EXPIRE) added the chunk twice: /run_sse, the SSE route and
    # `adk-celery follow` showed it twice.
    proxy, client = proxied
    stream = RedisEventStream(client)
    await redis_client.script_load(stream._publish.script.source)
    proxy.needle = stream._publish.sha.encode()

    chunk = Event(invocation_id="e-1", author="agent", partial=True,
                  content=types.Content(role="model", parts=[types.Part(text="Hel")]))
    await stream.publish(_record(), chunk)
    assert proxy.lost == 1
    key = keys.invocation_stream("a", "e-1")
    entries = await redis_client.xrange(key)
    assert len(entries) == 1
    assert await redis_client.ttl(key) > 0

    # Readers take the entry for the chunk alone (the call's id in it is not shown).
    [(entry_id, fields)] = entries
    item = LiveItem.parse(entry_id, fields)
    assert item is not None and item.partial and item.json == chunk.to_json()
    await redis_client.xadd(key, {"kind": "status", "status": "completed"})
    followed = [item async for item in stream.follow("a", "e-1", timeout=5)]
    assert [(i.kind, i.event.id if i.event else i.status) for i in followed] == [
        ("event", chunk.id), ("status", InvocationStatus.COMPLETED)]


async def test_the_same_chunk_published_twice_is_streamed_twice(redis_client):
    # A second call is a second entry, even of an identical event (only a run again is one).
    stream = RedisEventStream(redis_client)
    chunk = Event(invocation_id="e-1", author="agent", partial=True,
                  content=types.Content(role="model", parts=[types.Part(text="\n")]))
    await stream.publish(_record(), chunk)
    await stream.publish(_record(), chunk)
    assert await redis_client.xlen(keys.invocation_stream("a", "e-1")) == 2


async def test_a_session_created_by_a_lost_reply_is_not_reported_existing(proxied, redis_client):
    # Run again, the create found the session its first run made and said "already exists":
    # the API answered 409 for a session it had just created (with a generated id: orphaned).
    from orchestrator.backends.redis.session_service import RedisSessionService

    proxy, client = proxied
    sessions = RedisSessionService(client=client)
    await redis_client.script_load(sessions._create_script.script.source)
    proxy.needle = sessions._create_script.sha.encode()

    created = await sessions.create_session(app_name="a", user_id="u", session_id="s1",
                                            state={"user:tier": "gold", "n": 1})

    assert proxy.lost == 1
    assert (created.id, created.state) == ("s1", {"user:tier": "gold", "n": 1})
    with pytest.raises(Exception, match="already exists"):  # another create still is refused
        await sessions.create_session(app_name="a", user_id="u", session_id="s1")


async def test_a_chunk_run_again_after_another_writers_entry_is_streamed_once(
        proxied, redis_client):
    # A worker's progress report (or a status) landing between the two runs put another
    # entry last: a second run that looked at the last entry only added the chunk again.
    proxy, client = proxied
    stream = RedisEventStream(client)
    key = keys.invocation_stream("a", "e-1")
    await redis_client.script_load(stream._publish.script.source)
    proxy.needle = stream._publish.sha.encode()

    async def progress_meanwhile() -> None:
        await redis_client.xadd(key, {"kind": "progress", "call": "c1"})

    proxy.on_lost = progress_meanwhile
    chunk = Event(invocation_id="e-1", author="agent", partial=True,
                  content=types.Content(role="model", parts=[types.Part(text="Hel")]))
    await stream.publish(_record(), chunk)

    assert proxy.lost == 1
    kinds = [fields["kind"] for _, fields in await redis_client.xrange(key)]
    assert kinds == ["event", "progress"]
