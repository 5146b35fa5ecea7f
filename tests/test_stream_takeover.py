"""A streamed answer cut off by its orchestrator's death: the heir's answer takes its place.

With ``streaming``, an answer's partial chunks reach the live stream before the answer is
committed, all under the answer's event id; clients such as google-adk's web UI show the
chunks and the answer of one id as one message. An orchestrator killed after its first
chunk leaves that chunk on the stream; the orchestrator that takes the invocation over
calls the model again. Its chunks and its answer carry the cut-off chunk's id, so a
follower ends with one message, the committed answer, not a cut-off one beside it.

Unit tests read the abandoned chunks back from both stream back-ends; the process test
kills a real orchestrator at ``orchestrator.chunk_published`` (Redis db 6).
"""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aioredis
from google.genai import types

from config import Settings
from orchestrator.backends.redis.streams import RedisEventStream
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.events.event import Event
from orchestrator.flows.retried_answers import answer_id_for, answering_as
from tests.apps_stream import APP_SPECS
from tests.support.processes import stack_env, start_celery_process

S = InvocationStatus


def _record() -> InvocationRecord:
    return InvocationRecord(invocation_id="e-1", app_name="app", user_id="u", session_id="s",
                            streaming=True)


def _text(text: str, *, author: str = "agent", branch: str | None = None,
          partial: bool = False, event_id: str | None = None) -> Event:
    event = Event(invocation_id="e-1", author=author, branch=branch, partial=partial or None,
                  content=types.Content(role="model", parts=[types.Part(text=text)]))
    if event_id is not None:
        event.id = event_id
    return event


@pytest.fixture(params=["redis", "memory"])
async def stream_and_status(request):
    """A stream, and how a status entry lands on it (the store's save, as orchestrators do)."""
    if request.param == "memory":
        runtime = EmbeddedRuntime(AppRegistry([]))
        yield runtime.event_stream, runtime.event_stream.publish_status
        return
    client = aioredis.Redis.from_url(request.getfixturevalue("redis_url"), decode_responses=True)
    await client.flushdb()
    stream = RedisEventStream(client, ttl_seconds=60)

    async def status(app_name: str, invocation_id: str, status: InvocationStatus) -> None:
        from orchestrator.backends.redis import keys

        await client.xadd(keys.invocation_stream(app_name, invocation_id),
                          {"kind": "status", "status": status.value})

    try:
        yield stream, status
    finally:
        await client.aclose()


async def test_the_chunks_after_the_latest_status_that_no_committed_event_has(stream_and_status):
    stream, status = stream_and_status
    record = _record()
    earlier = _text("old", partial=True)  # a chunk before the run's start: not this run's
    await stream.publish(record, earlier)
    await status("app", "e-1", S.RUNNING)
    answered = _text("Hel", partial=True)
    await stream.publish(record, answered)
    await stream.publish(record, _text("Hello", event_id=answered.id))  # its answer, committed
    cut_a = [_text("Wor", partial=True), _text("ld", partial=True)]
    cut_a[1].id = cut_a[0].id  # one answer's chunks share its id
    cut_b = _text("Br", author="b", branch="root.b", partial=True)
    for event in (*cut_a, cut_b):
        await stream.publish(record, event)

    found = await stream.abandoned_chunks(record, {answered.id})

    assert found == {("agent", None): cut_a[0].id, ("b", "root.b"): cut_b.id}
    assert await stream.abandoned_chunks(
        InvocationRecord(invocation_id="e-2", app_name="app", user_id="u", session_id="s"),
        set()) == {}


async def test_a_long_stream_is_read_back_in_pages(stream_and_status):
    stream, status = stream_and_status
    record = _record()
    await status("app", "e-1", S.RUNNING)
    first = _text("0", partial=True)
    await stream.publish(record, first)
    for n in range(450):  # past two pages of the Redis read-back
        await stream.publish(record, _text(str(n), author="other", partial=True))

    found = await stream.abandoned_chunks(record, set())

    assert found[("agent", None)] == first.id


def test_each_answer_id_is_taken_once_and_only_inside_its_block():
    with answering_as({("agent", None): "x1"}):
        assert answer_id_for("other", None) is None
        assert answer_id_for("agent", "root.agent") is None
        assert answer_id_for("agent", None) == "x1"
        assert answer_id_for("agent", None) is None
    with answering_as({("agent", None): "x2"}):
        pass
    assert answer_id_for("agent", None) is None


# ---- a real orchestrator killed after its first chunk ---------------------------------------


def test_the_heirs_answer_carries_the_id_of_the_chunks_its_dead_predecessor_streamed(redis_url):
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + "/6"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2", lease_ttl_seconds="2")
    doomed = start_celery_process(
        "orchestrator", "doomed-stream",
        {**env, "ADK_CELERY_FAILPOINTS": "orchestrator.chunk_published=kill"})
    client = Client(Settings(redis_url=url, apps=APP_SPECS, lease_retry_seconds=0.2))
    heir = None
    try:
        inv = client.enqueue("stream_chat", "u", "hello there", streaming=True)
        doomed.proc.wait(60)
        assert doomed.proc.returncode == -9, doomed.output()  # killed after its first chunk
        heir = start_celery_process("orchestrator", "heir-stream", env)
        record = client.wait("stream_chat", inv, timeout=60, until=S.FINISHED)
        assert record.status is S.COMPLETED, record.error
        items = list(client.follow("stream_chat", inv, until=S.FINISHED, timeout=30))
        answers = [e for e in client.events("stream_chat", inv) if e.author == "agent"]
    finally:
        client.close()
        doomed.stop()
        if heir is not None:
            heir.stop()

    assert [e.content.parts[0].text for e in answers] == ["echo: hello there"]  # answered once
    chunks = [i.event for i in items if i.partial]
    # The dead run's first chunk, then the heir's two; every one of them, and the answer,
    # under one id: one message for a follower, ending as the committed answer.
    assert [c.content.parts[0].text for c in chunks] == ["echo: ", "echo: ", "hello there"]
    assert {c.id for c in chunks} == {answers[0].id}
