"""Live event stream: every event of an invocation, partial chunks included, as it happens.

Unit tests run RedisEventStream against a real redis-server; the embedded runtime's in-memory
stream goes through the same scenarios; the integration tests follow invocations run by real
orchestrator and worker processes (Redis db 6), live, with the Python client and the CLI.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import redis
import redis.asyncio as aioredis
from google.genai import types

from config import Settings
from orchestrator import App, LlmAgent, LongRunningFunctionTool
from orchestrator.backends.memory.streams import InMemoryEventStream
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.streams import RedisEventStream
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, ToolResult
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.streams import StreamItem
from orchestrator.events.event import Event
from orchestrator.models.fake import FunctionLlm
from tests.apps_stream import APP_SPECS, STREAM_APPS, gate_key
from tests.support import forked
from tests.support.processes import stack_env, start_celery_process
from workers.celery_app import TASK_INVOKE
from workers.cli import EventPrinter, describe_event

S = InvocationStatus
APP = "app"


def _record(invocation_id: str = "e-1") -> InvocationRecord:
    return InvocationRecord(invocation_id=invocation_id, app_name=APP, user_id="u", session_id="s")


def _text_event(text: str, *, partial: bool = False, author: str = "agent") -> Event:
    return Event(invocation_id="e-1", author=author, partial=partial or None,
                 content=types.Content(role="model", parts=[types.Part(text=text)]))


def _call_event(name: str = "tool", call_id: str = "c1") -> Event:
    return Event(invocation_id="e-1", author="agent", long_running_tool_ids={call_id},
                 content=types.Content(role="model", parts=[types.Part(
                     function_call=types.FunctionCall(id=call_id, name=name, args={"x": 1}))]))


def _shape(items: list[StreamItem]) -> list[object]:
    """Statuses as themselves, events as (id, partial)."""
    return [item.status if item.kind == "status" else (item.event.id, item.partial)
            for item in items]


async def _collect(stream, invocation_id: str = "e-1", **kwargs) -> list[StreamItem]:
    return [item async for item in stream.follow(APP, invocation_id, **kwargs)]


class _Pair:
    """A stream and a store writing to it, as the orchestrator has them."""

    def __init__(self, stream, store) -> None:
        self.stream, self.store = stream, store

    async def status(self, record: InvocationRecord, status: InvocationStatus) -> None:
        record.status = status
        if status is S.QUEUED:
            await self.store.create(record)
        else:
            await self.store.save(record)


@pytest.fixture(params=["redis", "memory"])
async def pair(request):
    if request.param == "memory":
        runtime = EmbeddedRuntime(AppRegistry([]))
        yield _Pair(runtime.event_stream, runtime.store)
        return
    client = aioredis.Redis.from_url(request.getfixturevalue("redis_url"), decode_responses=True)
    await client.flushdb()
    try:
        yield _Pair(RedisEventStream(client, ttl_seconds=60),
                    RedisInvocationStore(client, record_ttl_seconds=60))
    finally:
        await client.aclose()


# ---- publish / follow --------------------------------------------------------------------


async def test_follow_replays_events_and_statuses_in_publication_order(pair):
    record = _record()
    events = [_text_event("Hel", partial=True), _text_event("lo", partial=True),
              _text_event("Hello"), _call_event()]
    await pair.status(record, S.QUEUED)
    await pair.status(record, S.RUNNING)
    for event in events:
        await pair.stream.publish(record, event)
    await pair.status(record, S.COMPLETED)

    items = await _collect(pair.stream, timeout=5)

    assert _shape(items) == [S.QUEUED, S.RUNNING, *[(e.id, bool(e.partial)) for e in events],
                             S.COMPLETED]
    got = [i.event for i in items if i.event is not None]
    assert [e.content.parts[0].text for e in got[:3]] == ["Hel", "lo", "Hello"]
    assert got[3].long_running_tool_ids == {"c1"}
    assert got[3].get_function_calls()[0].args == {"x": 1}


async def test_redis_entries_are_event_wire_json_with_a_partial_flag_and_expire(redis_client):
    stream = RedisEventStream(redis_client, ttl_seconds=60)
    record = _record()
    chunk, final = _text_event("Hel", partial=True), _text_event("Hello")
    await stream.publish(record, chunk)
    await stream.publish(record, final)

    key = keys.invocation_stream(APP, "e-1")
    entries = await redis_client.xrange(key)
    pubs = [fields.pop("pub") for _, fields in entries]  # each publish call's own id
    assert [fields for _, fields in entries] == [
        {"kind": "event", "event": chunk.to_json(), "partial": "1"},
        {"kind": "event", "event": final.to_json(), "partial": "0"},
    ]
    assert len(set(pubs)) == 2
    assert 0 < await redis_client.ttl(key) <= 60


async def test_redis_stream_length_is_capped(redis_client):
    stream = RedisEventStream(redis_client, maxlen=50)
    record = _record()
    for n in range(600):
        await stream.publish(record, _text_event(str(n), partial=True))
    length = await redis_client.xlen(keys.invocation_stream(APP, "e-1"))
    assert 50 <= length < 600  # approximate trimming keeps whole nodes


async def test_a_follower_started_first_gets_each_entry_as_it_is_published(pair):
    record = _record()
    received: asyncio.Queue[StreamItem] = asyncio.Queue()

    async def follower() -> list[StreamItem]:
        items = []
        async for item in pair.stream.follow(APP, "e-1", timeout=10):
            items.append(item)
            received.put_nowait(item)
        return items

    task = asyncio.create_task(follower())
    # Each entry reaches the follower before the next one is even published.
    await pair.status(record, S.QUEUED)
    assert (await asyncio.wait_for(received.get(), 5)).status is S.QUEUED
    await pair.status(record, S.RUNNING)
    assert (await asyncio.wait_for(received.get(), 5)).status is S.RUNNING
    chunk, final = _text_event("a", partial=True), _text_event("ab")
    await pair.stream.publish(record, chunk)
    assert (await asyncio.wait_for(received.get(), 5)).event.id == chunk.id
    await pair.stream.publish(record, final)
    assert (await asyncio.wait_for(received.get(), 5)).event.id == final.id
    assert not task.done()
    await pair.status(record, S.COMPLETED)
    items = await asyncio.wait_for(task, 5)
    assert _shape(items) == [S.QUEUED, S.RUNNING, (chunk.id, True), (final.id, False), S.COMPLETED]


async def test_a_follower_started_late_still_replays_from_the_start(pair):
    record = _record()
    event = _text_event("done")
    await pair.status(record, S.QUEUED)
    await pair.status(record, S.RUNNING)
    await pair.stream.publish(record, event)
    await pair.status(record, S.COMPLETED)

    assert _shape(await _collect(pair.stream, timeout=5)) == [
        S.QUEUED, S.RUNNING, (event.id, False), S.COMPLETED]
    # Twice: following does not consume anything.
    assert len(await _collect(pair.stream, timeout=5)) == 4
    # From now on: an invocation that is already over just reports how it ended.
    assert _shape(await _collect(pair.stream, from_start=False, timeout=5)) == [S.COMPLETED]


async def test_follow_from_now_skips_history(pair):
    record = _record()
    old, new = _text_event("old"), _text_event("new")
    await pair.status(record, S.QUEUED)
    await pair.status(record, S.RUNNING)
    await pair.stream.publish(record, old)

    task = asyncio.create_task(_collect(pair.stream, from_start=False, timeout=10))
    await pair.stream.publish(record, new)
    await pair.status(record, S.COMPLETED)
    shape = _shape(await asyncio.wait_for(task, 5))
    # Whether ``new`` shows depends on when the follower made its first read; history never.
    assert shape in ([(new.id, False), S.COMPLETED], [S.COMPLETED])


async def test_follow_stops_at_a_status_in_until(pair):
    record = _record()
    await pair.status(record, S.QUEUED)
    await pair.status(record, S.RUNNING)
    # An unfinished status in ``until`` ends the follow while it is the current one ...
    assert _shape(await _collect(pair.stream, until={S.RUNNING}, timeout=5)) == [S.QUEUED, S.RUNNING]

    call = _call_event()
    await pair.stream.publish(record, call)
    await pair.status(record, S.PAUSED)
    # ... the default stops when the invocation is paused (or over) ...
    assert _shape(await _collect(pair.stream, timeout=5)) == [
        S.QUEUED, S.RUNNING, (call.id, False), S.PAUSED]
    # ... S.FINISHED follows through the pause (nothing more comes: the timeout hits), and a
    # status that is history no longer stops anything.
    with pytest.raises(TimeoutError):
        await _collect(pair.stream, until=S.FINISHED, timeout=0.3)
    with pytest.raises(TimeoutError):
        await _collect(pair.stream, until={S.RUNNING}, timeout=0.3)

    answer = _text_event("answered")
    await pair.stream.publish(record, answer)
    await pair.status(record, S.COMPLETED)
    full = [S.QUEUED, S.RUNNING, (call.id, False), S.PAUSED, (answer.id, False), S.COMPLETED]
    # A replay goes past a pause the invocation has since resumed from; a finished status
    # always ends a follow.
    assert _shape(await _collect(pair.stream, until=S.SETTLED, timeout=5)) == full
    assert _shape(await _collect(pair.stream, until=set(), timeout=5)) == full


async def test_follow_waits_for_an_invocation_that_does_not_exist_yet(pair):
    with pytest.raises(TimeoutError):
        await _collect(pair.stream, "e-none", timeout=0.2)


async def test_unknown_entry_kinds_are_skipped(redis_client):
    stream = RedisEventStream(redis_client)
    store = RedisInvocationStore(redis_client)
    record = _record()
    await store.create(record)
    await redis_client.xadd(keys.invocation_stream(APP, "e-1"), {"kind": "from-a-later-version", "x": "1"})
    await redis_client.xadd(keys.invocation_stream(APP, "e-1"), {"kind": "status", "status": "??"})
    record.status = S.FAILED
    await store.save(record)
    assert _shape(await _collect(stream, timeout=5)) == [S.QUEUED, S.FAILED]


def _waiting_entry(call_id: str = "c1") -> dict[str, str]:
    return {"kind": "waiting", "call": call_id, "tool": "tool"}


async def test_a_placeholder_says_on_both_streams_that_its_call_waits_for_outside(redis_client):
    store = RedisInvocationStore(redis_client, record_ttl_seconds=60)
    record = _record()
    await store.create(record)
    live, statuses = keys.invocation_stream(APP, "e-1"), keys.invocation_statuses(APP, "e-1")
    placeholder = ToolResult(function_call_id="c1", tool_name="tool")
    assert await store.put_result(APP, "e-1", placeholder)
    for key in (live, statuses):
        entries = await redis_client.xrange(key)
        assert [fields["kind"] for _, fields in entries] == ["status", "waiting"]
        assert entries[-1][1] == _waiting_entry()
    # A final answer says nothing there (its resume does); a placeholder that comes after
    # it is refused, and says nothing either.
    assert await store.put_result(APP, "e-1", ToolResult(function_call_id="c1", tool_name="tool",
                                                         response={"ok": True}))
    assert not await store.put_result(APP, "e-1", placeholder)
    assert [await redis_client.xlen(key) for key in (live, statuses)] == [2, 2]
    # Streams that are gone are not made again for it.
    await redis_client.delete(live, statuses)
    assert await store.put_result(APP, "e-1", ToolResult(function_call_id="c2", tool_name="tool"))
    assert await redis_client.exists(live, statuses) == 0


async def test_a_call_left_to_outside_after_a_pause_does_not_hide_the_pause(redis_client):
    stream = RedisEventStream(redis_client, ttl_seconds=60)
    pair = _Pair(stream, RedisInvocationStore(redis_client, record_ttl_seconds=60))
    record = _record()
    await pair.status(record, S.QUEUED)
    call = _call_event()
    await stream.publish(record, call)
    await pair.status(record, S.PAUSED)
    await pair.store.put_result(APP, "e-1", ToolResult(function_call_id="c1", tool_name="tool"))
    # The pause is still the current status: a follow stops there (from the start, or from
    # now), and the entry is no item of it.
    assert _shape(await _collect(stream, timeout=5)) == [S.QUEUED, (call.id, False), S.PAUSED]
    assert _shape(await _collect(stream, from_start=False, timeout=5)) == [S.PAUSED]


async def test_in_memory_stream_keeps_copies_and_caps_its_length():
    stream = InMemoryEventStream(maxlen=3)
    event = _text_event("first")
    await stream.publish(_record(), event)
    event.content.parts[0].text = "changed"
    await stream.publish_status(APP, "e-1", S.COMPLETED)
    items = await _collect(stream, timeout=5)
    assert [i.event.content.parts[0].text if i.event else i.status for i in items] == [
        "first", S.COMPLETED]

    for n in range(4):
        await stream.publish(_record("e-2"), _text_event(str(n)))
    await stream.publish_status(APP, "e-2", S.COMPLETED)
    items = await _collect(stream, "e-2", timeout=5)
    assert [i.event.content.parts[0].text if i.event else i.status for i in items] == [
        "2", "3", S.COMPLETED]


# ---- embedded runtime ----------------------------------------------------------------------


async def test_embedded_follow_streams_partial_chunks_then_the_committed_answer():
    rt = EmbeddedRuntime(AppRegistry(STREAM_APPS))
    inv = await rt.enqueue(app_name="stream_chat", user_id="u", new_message="hi", streaming=True)
    items = await _collect_rt(rt, "stream_chat", inv)

    assert [i.status for i in items if i.kind == "status"] == [S.QUEUED, S.RUNNING, S.COMPLETED]
    events = [i.event for i in items if i.event is not None]
    assert [(e.author, e.content.parts[0].text, bool(e.partial)) for e in events] == [
        ("user", "hi", False), ("agent", "echo: ", True), ("agent", "hi", True),
        ("agent", "echo: hi", False)]
    # The committed events are the session's, in order (the user's message first).
    assert _committed_ids(items) == _ids(await rt.events("stream_chat", inv))


async def test_embedded_without_streaming_publishes_committed_events_only():
    rt = EmbeddedRuntime(AppRegistry(STREAM_APPS))
    inv = await rt.enqueue(app_name="stream_chat", user_id="u", new_message="hi")
    items = await _collect_rt(rt, "stream_chat", inv)
    assert [(i.event.content.parts[0].text, i.partial) for i in items if i.event] == [
        ("hi", False), ("echo: hi", False)]


async def test_embedded_follow_is_live_while_a_remote_call_runs():
    gate = asyncio.Event()

    async def gated(label: str) -> dict:
        """Wait for the test's release."""
        await gate.wait()
        return {"label": label}

    def model(request):
        answered = [p for c in request.contents for p in c.parts or [] if p.function_response]
        if answered:
            return f"done {answered[-1].function_response.response['label']}"
        return types.Part(function_call=types.FunctionCall(name="gated", args={"label": "x"}))

    app = App(name="live", root_agent=LlmAgent(name="agent", model=FunctionLlm(fn=model),
                                                 tools=[LongRunningFunctionTool(gated)]))
    rt = EmbeddedRuntime(AppRegistry([app]))
    inv = await rt.enqueue(app_name="live", user_id="u", new_message="go")
    items: list[StreamItem] = []
    async for item in rt.follow("live", inv, until=S.FINISHED, timeout=10):
        items.append(item)
        if item.event is not None and item.event.get_function_calls():
            assert not gate.is_set()
            gate.set()  # released only once the follower has seen the call
    assert [i.status for i in items if i.kind == "status"] == [
        S.QUEUED, S.RUNNING, S.PAUSED, S.COMPLETED]
    assert _committed_ids(items) == _ids(await rt.events("live", inv))
    assert items[-2].event.content.parts[0].text == "done x"


async def test_embedded_follow_stops_when_paused_and_replays_past_it_later():
    rt = EmbeddedRuntime(AppRegistry(STREAM_APPS))
    inv = await rt.enqueue(app_name="stream_approval", user_id="u", new_message="pay")
    items = await _collect_rt(rt, "stream_approval", inv, until=S.SETTLED)
    assert items[-1].status is S.PAUSED
    call_id = items[-2].event.get_function_calls()[0].id

    await rt.answer("stream_approval", inv, call_id, {"ok": True})
    await rt.wait("stream_approval", inv, until=S.FINISHED, timeout=10)
    replay = await _collect_rt(rt, "stream_approval", inv, until=S.SETTLED)
    assert [i.status for i in replay if i.kind == "status"] == [
        S.QUEUED, S.RUNNING, S.PAUSED, S.COMPLETED]
    assert _committed_ids(replay) == _ids(
        await rt.events("stream_approval", inv))


async def _collect_rt(rt: EmbeddedRuntime, app: str, inv: str, until=S.FINISHED) -> list[StreamItem]:
    return [item async for item in rt.follow(app, inv, until=until, timeout=10)]


def _committed_ids(items: list[StreamItem]) -> list[str]:
    return [i.event.id for i in items if i.event is not None and not i.partial]


def _ids(events: list[Event]) -> list[str]:
    return [e.id for e in events]


def _but_invocation_id(event: Event) -> dict:
    wire = event.to_wire()
    wire.pop("invocationId", None)
    return wire


async def test_published_answers_are_the_committed_events():
    rt = EmbeddedRuntime(AppRegistry(STREAM_APPS))
    inv = await rt.enqueue(app_name="stream_approval", user_id="u", new_message="pay")
    record = await rt.wait("stream_approval", inv, timeout=10)
    await rt.answer("stream_approval", inv, record.pending_calls[0], {"ok": True})
    await rt.wait("stream_approval", inv, until=S.FINISHED, timeout=10)
    items = await _collect_rt(rt, "stream_approval", inv)
    committed = [i.event.to_json() for i in items if i.event is not None]
    assert committed == [e.to_json() for e in (await rt.events("stream_approval", inv))]


# ---- CLI formatting ------------------------------------------------------------------------


def test_event_printer_prints_one_line_per_event_and_chunks_inline(capsys):
    printer = EventPrinter(sys.stdout)
    call = _call_event("lookup", "c9")
    response = Event(author="agent", content=types.Content(role="user", parts=[types.Part(
        function_response=types.FunctionResponse(id="c9", name="lookup", response={"ok": True}))]))
    for item in [StreamItem.of_status(S.RUNNING), StreamItem.of_event(_text_event("Hel", partial=True)),
                 StreamItem.of_event(_text_event("lo", partial=True)),
                 StreamItem.of_event(_text_event("Hello")), StreamItem.of_event(call),
                 StreamItem.of_event(response), StreamItem.of_status(S.COMPLETED)]:
        printer.print(item)
    assert capsys.readouterr().out.splitlines() == [
        "[running]",
        "agent ~ Hello",
        "agent: Hello",
        'agent: call lookup({"x": 1}) [c9] (long-running)',
        'agent: response lookup -> {"ok": true}',
        "[completed]",
    ]
    assert describe_event(Event(author="agent")) == "agent: (no content)"


# ---- real orchestrator and worker processes --------------------------------------------------


@pytest.fixture(scope="module")
def stream_stack(redis_url):
    """Redis db 6, one orchestrator process and one worker process serving tests/apps_stream."""
    url = redis_url.rsplit("/", 1)[0] + "/6"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2")
    orchestrator = start_celery_process("orchestrator", "stream-orch", env)
    try:
        worker = start_celery_process("worker", "stream-work", env)
    except BaseException:
        orchestrator.stop()
        raise
    from workers.client import Client

    client = Client(Settings(redis_url=url, apps=APP_SPECS, lease_retry_seconds=0.2))
    try:
        yield {"client": client, "url": url, "env": env}
    finally:
        client.close()
        orchestrator.stop()
        worker.stop()


def test_client_follows_an_invocation_live_on_other_processes(stream_stack):
    client, url = stream_stack["client"], stream_stack["url"]
    gate = redis.Redis.from_url(url)
    inv = client.enqueue("stream_gated", "u", "open sesame", streaming=True)
    items: list[StreamItem] = []
    released = False
    for item in client.follow("stream_gated", inv, until=S.FINISHED, timeout=60):
        items.append(item)
        if item.event is not None and item.event.get_function_calls() and not item.partial:
            # The call reached us while the tool is still blocked on its gate: the run is
            # in progress on the other processes, and its answer is not in the session.
            assert not released
            record = client.status("stream_gated", inv)
            assert record is not None and record.status in (S.RUNNING, S.PAUSED)
            assert not any(e.get_function_responses() for e in client.events("stream_gated", inv))
            gate.rpush(gate_key(inv), "test")
            released = True
    gate.close()

    assert released
    assert [i.status for i in items if i.kind == "status"] == [
        S.QUEUED, S.RUNNING, S.PAUSED, S.COMPLETED]
    committed = [i.event for i in items if i.event is not None and not i.partial]
    session_events = client.events("stream_gated", inv)
    # The same events as the session, in the same order.
    assert [e.id for e in committed] == [e.id for e in session_events]
    # (Answers are published before they are committed, without their invocation id:
    # see test_published_answers_are_the_committed_events.)
    assert [_but_invocation_id(e) for e in committed] == [
        _but_invocation_id(e) for e in session_events]
    # Streamed chunks came before the call they lead up to; they are never stored.
    call_at = next(n for n, i in enumerate(items) if i.event and i.event.get_function_calls())
    chunks = [i.event.content.parts[0].text for i in items[:call_at] if i.partial]
    assert chunks == ["Opening ", "the gate"]
    assert not {i.event.id for i in items if i.partial} - {e.id for e in committed}  # ids shared
    assert committed[2].get_function_responses()[0].response["released"] is True
    assert committed[-1].content.parts[0].text == "gated sesame released=True by test"


def test_an_abandoned_follow_leaves_nothing_running(stream_stack):
    client = stream_stack["client"]
    inv = client.enqueue("stream_approval", "u", "pay")  # pauses for an answer from outside
    follow = client.follow("stream_approval", inv, until=S.FINISHED, timeout=60)
    for item in follow:
        if item.event is not None and item.event.get_function_calls():
            break
    follow.close()
    assert client._runtime.run(_other_tasks()) == 0
    # The client goes on working; a follow of the paused invocation, by default, ends there.
    statuses = [i.status for i in client.follow("stream_approval", inv, timeout=30) if i.status]
    assert statuses == [S.QUEUED, S.RUNNING, S.PAUSED]
    with pytest.raises(TimeoutError):
        for _ in client.follow("stream_approval", inv, until=S.FINISHED, timeout=0.3):
            pass
    assert client._runtime.run(_other_tasks()) == 0
    client.cancel("stream_approval", inv)
    assert client.wait("stream_approval", inv, until=S.FINISHED, timeout=30).status is S.CANCELLED


async def _other_tasks() -> int:
    return len(asyncio.all_tasks()) - 1


def test_enqueue_rejects_a_non_boolean_streaming_flag(stream_stack):
    client = stream_stack["client"]
    client._celery.send_task(TASK_INVOKE, kwargs={
        "app_name": "stream_chat", "user_id": "u", "new_message": "hi", "streaming": "yes",
        "invocation_id": "e-bad-streaming"}).get(timeout=30)  # recorded (wait: unknown before)
    record = client.wait("stream_chat", "e-bad-streaming", timeout=30)
    assert record.status is S.FAILED and "streaming" in (record.error or "")


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "workers.cli", *args], env=env, timeout=60)


def test_cli_enqueue_follow_and_follow(stream_stack):
    env = stream_stack["env"]
    run = _cli(env, "enqueue", "stream_chat", "u", "hello there", "--stream", "--follow",
               "--timeout", "30")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    inv = lines[0]
    assert inv.startswith("e-")
    assert lines[1:] == ["[queued]", "[running]", "user: hello there", "agent ~ echo: hello there",
                         "agent: echo: hello there", "[completed]"]

    replay = _cli(env, "follow", "stream_chat", inv, "--timeout", "30")
    assert replay.returncode == 0, replay.stderr
    assert replay.stdout.splitlines() == lines[1:]


async def test_client_afollow_is_an_async_iterator_on_the_callers_loop(celery_stack):
    client = celery_stack["client"]
    inv = await asyncio.to_thread(client.enqueue, "lookup", "u", "look up Oslo")
    items = [item async for item in client.afollow("lookup", inv, until=S.FINISHED, timeout=30)]
    assert items[-1].kind == "status" and items[-1].status is S.COMPLETED
    followed = [i.event.id for i in items if i.event is not None and not i.event.partial]
    committed = await asyncio.to_thread(client.events, "lookup", inv)
    assert followed == [e.id for e in committed]
