"""How ``/run`` follows a run (workers/api/runs.py), over streams written as orchestrators do.

A run ends at its invocation's end, or at a pause for an answer from outside; a pause while a
worker runs the call is not an end. The entries are written here into a real redis-server
the way the orchestrator and the workers write them, so each case is exact.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from google.genai import types

from config import Settings
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.streams import RedisEventStream
from orchestrator.distributed.models import InvocationStatus, ToolResult
from orchestrator.events.event import Event
from tests.test_event_stream import APP, _call_event, _Pair, _record, _text_event
from workers.api import runs
from workers.api.backend import Backend
from workers.api.watches import Watch

S = InvocationStatus
GUARD = 10.0


@pytest.fixture
async def backend(redis_url):
    backend = Backend(Settings(redis_url=redis_url, apps=""))
    services = await backend.services()
    await services.redis.flushdb()
    yield backend
    await backend.aclose()
    backend.close()


@pytest.fixture
async def pair(backend):
    services = await backend.services()
    return _Pair(RedisEventStream(services.redis, ttl_seconds=60),
                 RedisInvocationStore(services.redis, record_ttl_seconds=60))


class _Looks(asyncio.Event):
    """Set each time a run has looked in Redis whether a pause waits for outside; counts them."""

    count = 0


@pytest.fixture
async def checks(backend, monkeypatch):
    """The looks a run makes (:class:`_Looks`)."""
    looked = _Looks()
    real = runs._waits_for_outside

    async def spy(backend, record):
        answer = await real(backend, record)
        looked.count += 1
        looked.set()
        return answer

    monkeypatch.setattr(runs, "_waits_for_outside", spy)
    return looked


@pytest.fixture
def pause_read(monkeypatch):
    """An event set once a run has read a pause (what it decides next is its own)."""
    read_it = asyncio.Event()
    read = Watch.read

    async def reading(self: Watch, timeout: float | None = None) -> Any:
        items, at_end = await read(self, timeout)
        if any(item.status is S.PAUSED for item in items):
            read_it.set()
        return items, at_end

    monkeypatch.setattr(Watch, "read", reading)
    return read_it


@pytest.fixture(params=["live", "at the end"])
def live(request) -> bool:
    """/run_sse hands events out as they come, /run reads them when the run ends."""
    return request.param == "live"


def _run(backend: Backend, live: bool, *, partial: bool = False) -> asyncio.Task[list[Any]]:
    async def collect() -> list[Any]:
        return [item async for item in runs.run_events(backend, _record(), partial=partial,
                                                       live=live)]

    return asyncio.create_task(asyncio.wait_for(collect(), GUARD))


def _user_message() -> Event:
    return Event(invocation_id="e-1", author="user",
                 content=types.Content(role="user", parts=[types.Part(text="go")]))


async def _start_and_pause(pair: _Pair, *, job_out: bool, partial_chunk: bool = False) -> list[Event]:
    """queued, running, the user's message, (a chunk,) a call to c1, paused on c1."""
    record = _record()
    await pair.status(record, S.QUEUED)
    await pair.status(record, S.RUNNING)
    shown = [_text_event("thinking", partial=True)] if partial_chunk else []
    call = _call_event()
    for event in [_user_message(), *shown, call]:
        await pair.stream.publish(record, event)
    if job_out:  # the orchestrator journals the job of a remote call before it pauses
        await pair.store._redis.hset(keys.invocation_jobs(APP, "e-1"), "a:c1", "1")
    record.pending_calls, record.pending_tools = ["c1"], {"c1": "tool"}
    await pair.status(record, S.PAUSED)
    return [*shown, call]


async def _resume_and_complete(pair: _Pair) -> list[Event]:
    record = _record()
    answer, final = _text_event("tool said ok"), _text_event("done")
    await pair.stream.publish(record, answer)
    await pair.stream.publish(record, final)
    await pair.status(record, S.COMPLETED)
    return [answer, final]


async def test_a_pause_while_a_worker_runs_the_call_is_not_the_end(backend, pair, checks, live):
    shown = await _start_and_pause(pair, job_out=True)
    # The record already says completed while the stream still ends with the pause (the
    # stream is read behind the record): the run must read on, not stop there.
    done = _record()
    done.status = S.COMPLETED
    await pair.store._redis.hset(keys.invocation(APP, "e-1"), "record", done.model_dump_json())
    run = _run(backend, live)
    await asyncio.wait_for(checks.wait(), GUARD)
    assert not run.done()
    rest = await _resume_and_complete(pair)
    # Every event but the user's message, as ADK's API server writes it.
    assert await run == [event.to_wire() for event in [*shown, *rest]]


async def test_a_run_that_goes_on_soon_after_a_pause_never_looks_at_it(
        backend, pair, checks, pause_read, monkeypatch, live):
    # A call that a worker answers quickly: no round trip to tell that pause from one for an
    # outside answer (the look would come _FIRST_LOOK_SECONDS after the pause), nor to read
    # its record (the live stream's entries do not carry it).
    monkeypatch.setattr(runs, "_FIRST_LOOK_SECONDS", GUARD)

    async def no_read(*_):
        raise AssertionError("the pause's record was read")

    monkeypatch.setattr(runs, "_read_on", no_read)
    shown = await _start_and_pause(pair, job_out=True)
    run = _run(backend, live)
    await asyncio.wait_for(pause_read.wait(), GUARD)
    rest = await _resume_and_complete(pair)
    assert await run == [event.to_wire() for event in [*shown, *rest]]
    assert not checks.is_set()


async def test_a_pause_for_an_outside_answer_ends_the_run(backend, pair, live):
    shown = await _start_and_pause(pair, job_out=False)
    assert await _run(backend, live) == [event.to_wire() for event in shown]


def _placeholder(call_id: str = "c1") -> ToolResult:
    """What a worker stores for a tool that returned nothing: the call waits for outside."""
    return ToolResult(function_call_id=call_id, tool_name="tool")


async def test_a_tool_that_left_its_call_to_an_outside_answer_ends_the_run_at_once(
        backend, pair, checks, pause_read, monkeypatch, live):
    # No look in Redis can end this run (the first would come after GUARD): only the entry the
    # worker's placeholder writes can, as soon as it is read.
    monkeypatch.setattr(runs, "_FIRST_LOOK_SECONDS", GUARD)
    shown = await _start_and_pause(pair, job_out=True)
    run = _run(backend, live)
    await asyncio.wait_for(pause_read.wait(), GUARD)
    assert not run.done()
    await pair.store.put_result(APP, "e-1", _placeholder())
    assert await run == [event.to_wire() for event in shown]
    assert checks.count == 0


async def test_after_its_one_look_a_run_is_ended_by_the_placeholder_not_by_looking_again(
        backend, pair, checks, live):
    shown = await _start_and_pause(pair, job_out=True)
    run = _run(backend, live)
    await asyncio.wait_for(checks.wait(), GUARD)  # the job is out: not a pause for outside
    assert not run.done()
    await pair.store.put_result(APP, "e-1", _placeholder())
    assert await run == [event.to_wire() for event in shown]
    assert checks.count == 1


async def test_a_placeholder_stored_before_the_pause_ends_the_run_at_the_pause(
        backend, pair, checks, monkeypatch, live):
    # The worker can be quicker than the orchestrator's save of the pause: the entry comes
    # first, and the pause that follows it ends the run (still no look).
    monkeypatch.setattr(runs, "_FIRST_LOOK_SECONDS", GUARD)
    record = _record()
    await pair.status(record, S.QUEUED)
    await pair.status(record, S.RUNNING)
    call = _call_event()
    await pair.stream.publish(record, call)
    await pair.store._redis.hset(keys.invocation_jobs(APP, "e-1"), "a:c1", "1")
    await pair.store.put_result(APP, "e-1", _placeholder())
    record.pending_calls, record.pending_tools = ["c1"], {"c1": "tool"}
    await pair.status(record, S.PAUSED)
    assert await _run(backend, live) == [call.to_wire()]
    assert checks.count == 0


async def test_a_call_left_to_outside_earlier_does_not_end_a_later_pause(
        backend, pair, checks, monkeypatch):
    # A run resumed after an answer (followed after the pause it resumes from) reads the
    # entry of the call it answered: its next pause, on a call a worker runs, goes on.
    monkeypatch.setattr(runs, "_FIRST_LOOK_SECONDS", 0.0)
    await _start_and_pause(pair, job_out=True)
    after = (await pair.store._redis.xrevrange(keys.invocation_stream(APP, "e-1"), count=1))[0][0]
    await pair.store.put_result(APP, "e-1", _placeholder("c1"))
    record = _record()
    await pair.status(record, S.RUNNING)
    second = _call_event(call_id="c2")
    await pair.stream.publish(record, second)
    await pair.store._redis.hset(keys.invocation_jobs(APP, "e-1"), "a:c2", "1")
    record.pending_calls, record.pending_tools = ["c2"], {"c2": "tool"}
    await pair.status(record, S.PAUSED)
    run = asyncio.create_task(asyncio.wait_for(
        _collect_after(backend, after), GUARD))
    await asyncio.wait_for(checks.wait(), GUARD)
    assert not run.done()
    rest = await _resume_and_complete(pair)
    assert await run == [event.to_wire() for event in [second, *rest]]


def _answer_event(call_id: str = "c1") -> Event:
    """The answer to a call as the orchestrator commits it on resuming."""
    return Event(invocation_id="e-1", author="agent", content=types.Content(role="user", parts=[
        types.Part(function_response=types.FunctionResponse(id=call_id, name="tool",
                                                            response={"ok": True}))]))


@pytest.fixture(params=["/run_sse", "/run", "resumed"])
def way(request) -> str:
    """How the run is followed: its live stream from the start (``/run_sse``), its status
    stream (``/run``), its live stream after an entry (either, after an answer)."""
    return request.param


async def _follow(backend: Backend, pair: _Pair, way: str) -> asyncio.Task[list[Any]]:
    """A run followed the ``way`` said (a resumed one after its ``running`` entry)."""
    if way != "resumed":
        return _run(backend, way == "/run_sse")
    after = (await pair.store._redis.xrange(keys.invocation_stream(APP, "e-1"), count=2))[1][0]
    return asyncio.create_task(asyncio.wait_for(_collect_after(backend, after), GUARD))


class _GoesOn:
    """What the orchestrator commits while a run stands at pause P1 (on c1) and has done
    nothing with it yet: c1's answer, the model's next call c2, pause P2 on c2."""

    def __init__(self, pair: _Pair) -> None:
        self.pair = pair
        self.answer, self.second = _answer_event("c1"), _call_event(call_id="c2")
        self.second_job_out = False
        """Whether a worker runs c2 (its job journaled), or it is left to outside."""
        self.done = asyncio.Event()

    async def commit(self) -> None:
        self.done.set()
        await self.pair.store.put_result(APP, "e-1", ToolResult(
            function_call_id="c1", tool_name="tool", response={"ok": True}))
        record = _record()
        record.status = S.PAUSED  # a resume saves no status of its own before its next one
        for event in (self.answer, self.second):
            await self.pair.stream.publish(record, event)
        if self.second_job_out:
            await self.pair.store._redis.hset(keys.invocation_jobs(APP, "e-1"), "a:c2", "1")
        record.pending_calls, record.pending_tools = ["c2"], {"c2": "tool"}
        await self.pair.status(record, S.PAUSED)


@pytest.fixture
def goes_on(pair, monkeypatch) -> _GoesOn:
    """:class:`_GoesOn`, committed as soon as a run has read a pause (before it returns
    from that read); the run's look at P1 is due at once."""
    monkeypatch.setattr(runs, "_FIRST_LOOK_SECONDS", 0.0)
    going = _GoesOn(pair)
    read = Watch.read

    async def reading(self: Watch, timeout: float | None = None) -> Any:
        items, at_end = await read(self, timeout)
        if not going.done.is_set() and any(item.status is S.PAUSED for item in items):
            await going.commit()
        return items, at_end

    monkeypatch.setattr(Watch, "read", reading)
    return going


async def test_a_pause_the_run_went_past_before_it_was_looked_at_is_not_taken_for_the_next(
        backend, pair, goes_on, way):
    # The record is P2's by the time the run reads it, and c2 waits for outside: the run
    # must still show c2's call (the client answers it by its id), and end at P2.
    shown = await _start_and_pause(pair, job_out=True)
    run = await _follow(backend, pair, way)
    assert await run == [event.to_wire() for event in [*shown, goes_on.answer, goes_on.second]]
    assert goes_on.done.is_set()
    paused = await backend.record(APP, "e-1")
    assert paused.status is S.PAUSED and paused.pending_calls == ["c2"]


async def test_the_entries_read_with_a_pause_record_are_shown_once(backend, pair, goes_on, checks, way):
    # A worker runs c2: the run goes on past P2, and the entries it read with P2's record
    # (also handed to it by the stream reader meanwhile) come out once.
    goes_on.second_job_out = True
    shown = await _start_and_pause(pair, job_out=True)
    run = await _follow(backend, pair, way)
    await asyncio.wait_for(checks.wait(), GUARD)
    assert not run.done()
    rest = await _resume_and_complete(pair)
    assert await run == [event.to_wire() for event in [*shown, goes_on.answer, goes_on.second, *rest]]


async def _collect_after(backend: Backend, after: str) -> list[Any]:
    return [item async for item in runs.run_events(backend, _record(), partial=False, after=after)]


async def test_progress_after_a_pause_does_not_hide_it(backend, pair, live):
    shown = await _start_and_pause(pair, job_out=False)
    await pair.store._redis.xadd(keys.invocation_stream(APP, "e-1"), {
        "kind": "progress", "call": "c1", "tool": "tool", "attempt": "1", "at": "1.0",
        "progress": '{"done": 0.5}'})
    assert await _run(backend, live) == [event.to_wire() for event in shown]


async def test_chunks_only_when_streaming_and_a_failure_says_why(backend, pair, live):
    shown = await _start_and_pause(pair, job_out=True, partial_chunk=True)
    chunk, call = shown
    record = _record()
    record.error = "ValueError: the tool broke"
    await pair.status(record, S.FAILED)
    for partial, expected in ((False, [call]), (True, [chunk, call])):
        items = await _run(backend, live, partial=partial)
        assert items[:-1] == [event.to_wire() for event in expected]
        assert isinstance(items[-1], RuntimeError) and str(items[-1]) == "ValueError: the tool broke"


async def test_the_body_of_run_is_the_events_json_and_a_failure_says_why(backend, pair):
    shown = await _start_and_pause(pair, job_out=False)
    body = await asyncio.wait_for(runs.run_body(backend, _record()), GUARD)
    assert json.loads(body) == [event.to_wire() for event in shown]
    record = _record()
    record.error = "ValueError: the tool broke"
    await pair.status(record, S.FAILED)
    with pytest.raises(runs.RunFailedError, match="ValueError: the tool broke"):
        await asyncio.wait_for(runs.run_body(backend, _record()), GUARD)


@pytest.fixture
async def blocked_hub(backend, redis_url, monkeypatch):
    """The backend's stream reader, blocked on a read that names only another stream; no
    wake-up of its own may be sent (the enqueue's transaction must carry it)."""
    from workers.api.stream_hub import StreamHub

    services = await backend.services()
    backend._hub = hub = StreamHub(redis_url, services.redis, block_ms=60_000)  # a read that stays out

    async def no_nudge():
        raise AssertionError("a wake-up of its own was sent")

    monkeypatch.setattr(hub, "_nudge", no_nudge)
    async with hub.watch(APP, "e-other", statuses=True):  # puts a read out
        while not hub._blocked:
            await asyncio.sleep(0.01)
        yield hub


async def _session(backend: Backend) -> None:
    services = await backend.services()
    await services.sessions.create_session(app_name=APP, user_id="u", session_id="s")


async def test_a_new_run_is_followed_from_its_enqueue_on_woken_by_its_transaction(backend, pair, blocked_hub):
    await _session(backend)
    fields = {"app_name": APP, "user_id": "u", "session_id": "s", "new_message": "go", "invocation_id": "e-1"}
    async with runs.enqueued(backend, fields) as (record, watch):
        assert record.status is S.QUEUED
        body = asyncio.create_task(asyncio.wait_for(runs.run_body(backend, record, watch=watch), GUARD))
        await pair.status(_record(), S.RUNNING)
        final = _text_event("done")
        await pair.stream.publish(_record(), final)
        await pair.status(_record(), S.COMPLETED)
        assert json.loads(await body) == [final.to_wire()]


@pytest.fixture
async def gated_hub(backend, redis_url, monkeypatch):
    """The backend's stream reader, whose first read waits until ``hub.gate`` is set: what a
    run decides on entering cannot depend on how fast the reader is."""
    from workers.api.stream_hub import StreamHub

    services = await backend.services()
    backend._hub = hub = StreamHub(redis_url, services.redis, block_ms=60_000)
    hub.gate = asyncio.Event()
    real = hub._read_loop

    async def gated():
        await hub.gate.wait()
        await real()

    monkeypatch.setattr(hub, "_read_loop", gated)
    return hub


async def test_a_new_run_is_followed_after_the_queued_status_its_enqueue_wrote(backend, pair, gated_hub):
    await _session(backend)
    fields = {"app_name": APP, "user_id": "u", "session_id": "s", "new_message": "go", "invocation_id": "e-1"}
    async with runs.enqueued(backend, fields) as (record, watch):
        await pair.status(_record(), S.RUNNING)
        gated_hub.gate.set()
        items, _ = await asyncio.wait_for(watch.read(), GUARD)
        assert [item.status for item in items] == [S.RUNNING]  # not the queued one before it


async def test_a_repeated_id_of_a_finished_run_answers_with_its_events_at_once(backend, pair, gated_hub):
    await _session(backend)
    fields = {"app_name": APP, "user_id": "u", "session_id": "s", "new_message": "go", "invocation_id": "e-1"}
    await backend.enqueue(fields, session_must_exist=True)
    final = _text_event("done")
    await pair.stream.publish(_record(), final)
    await pair.status(await backend.record(APP, "e-1"), S.COMPLETED)  # its message kept
    # Sent again: nothing is queued, and the run it names is over (followed from its start).
    async with runs.enqueued(backend, fields) as (again, watch):
        assert again.status is S.COMPLETED
        gated_hub.gate.set()
        assert json.loads(await asyncio.wait_for(runs.run_body(backend, again, watch=watch), GUARD)) == [
            final.to_wire()]


async def test_a_finished_run_gets_its_events_along_with_its_last_status(backend, pair, monkeypatch):
    async def read_again(*_):
        raise AssertionError("the events were read in a round trip of their own")

    monkeypatch.setattr(runs, "_committed", read_again)
    shown = await _start_and_pause(pair, job_out=True)
    rest = await _resume_and_complete(pair)
    assert await _run(backend, False) == [event.to_wire() for event in [*shown, *rest]]


async def test_events_that_cannot_be_read_fail_the_run_and_say_why(backend, pair):
    redis = pair.stream._redis
    await redis.set(keys.invocation_stream(APP, "e-1"), "not a stream")
    record = _record()
    record.status = S.COMPLETED
    await redis.xadd(keys.invocation_statuses(APP, "e-1"), {
        "kind": "status", "status": "completed", "record": record.model_dump_json()})
    with pytest.raises(Exception, match="WRONGTYPE"):
        await _run(backend, False)
