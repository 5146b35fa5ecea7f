"""A command whose reply is lost runs twice: the second run must answer as the first did.

The services' Redis clients send a command again when the connection drops after Redis ran
it and before its reply came back (a Redis restart, a reset connection). Each test loses the
reply of one script through a proxy (``tests/support/reply_loss.py``) and checks that what
the user sees is what one run gives: the run goes on with what it committed, a queued item
is not dropped, an accepted answer is not reported refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from orchestrator import platform
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.session_queue import RedisSessionQueue
from orchestrator.backends.redis.session_service import RedisSessionService
from orchestrator.backends.redis.streams import RedisEventStream
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.service import InvocationService
from orchestrator.distributed.stores import SessionKey
from tests.apps import ALL_APPS
from tests.support.reply_loss import ReplyLosingProxy
from workers.runtime import _leased_writer


@dataclass
class Stack:
    proxy: ReplyLosingProxy
    sessions: RedisSessionService
    store: RedisInvocationStore
    queue: RedisSessionQueue
    service: InvocationService

    async def start(self, app: str, session_id: str, text: str) -> str:
        record = InvocationRecord(
            invocation_id=platform.new_invocation_id(), app_name=app, user_id="u",
            session_id=session_id, new_message={"role": "user", "parts": [{"text": text}]})
        await self.service.submit(record)
        return record.invocation_id

    async def paused_on_approval(self) -> tuple[SessionKey, str, str]:
        """An approval app's invocation run to its pause: (session key, invocation, call)."""
        session = await self.sessions.create_session(app_name="approval", user_id="u")
        key = ("approval", "u", session.id)
        inv = await self.start("approval", session.id, "pay")
        assert await self.service.drain(key)
        [call] = (await self.store.get("approval", inv)).pending_calls
        return key, inv, call


@pytest.fixture
def stack(proxied) -> Stack:
    """An orchestrator's services, in this process, talking to Redis through the proxy."""
    proxy, client = proxied
    sessions = RedisSessionService(client=client)
    store = RedisInvocationStore(client)
    queue = RedisSessionQueue(client, lease_ttl_seconds=30)
    events = RedisEventStream(client)
    service = InvocationService(
        AppRegistry(ALL_APPS), session_service=sessions, store=store, queue=queue,
        writer_for=lambda key, token, record: _leased_writer(sessions, events, key, token, record))
    return Stack(proxy, sessions, store, queue, service)


async def test_the_next_item_claimed_by_a_lost_reply_is_worked_on_not_dropped(stack):
    # Two calls of one turn; the second answer comes in while the first one's resume is
    # worked on, and the reply of the step that ends it and claims the next item is lost.
    # Run again, that step used to drop the second resume (alike, as JSON, to the first)
    # and let the lease go: both answers stored, the invocation paused for ever.
    session = await stack.sessions.create_session(app_name="two_approvals", user_id="u")
    key = ("two_approvals", "u", session.id)
    inv = await stack.start("two_approvals", session.id, "pay twice")
    assert await stack.service.drain(key)
    first, second = (await stack.store.get("two_approvals", inv)).pending_calls
    await stack.service.answer("two_approvals", inv, first, {"approved": 1})

    process = stack.service._process

    async def second_answer_meanwhile(*args, **kwargs):
        stack.service._process = process
        ended = await process(*args, **kwargs)
        await stack.service.answer("two_approvals", inv, second, {"approved": 2})
        stack.proxy.needle = stack.queue._claim_or_release.sha.encode()
        return ended

    stack.service._process = second_answer_meanwhile
    assert await stack.service.drain(key)
    assert stack.proxy.lost == 1

    record = await stack.store.get("two_approvals", inv)
    assert record.status is InvocationStatus.COMPLETED, (record.status, record.pending_calls)
    session = await stack.sessions.get_session(app_name="two_approvals", user_id="u",
                                                session_id=session.id)
    assert session.events[-1].content.parts[0].text == (
        "approvals: [\"{'approved': 1}\", \"{'approved': 2}\"]")


async def test_an_event_committed_by_a_lost_reply_is_seen_by_the_rest_of_the_run(stack):
    # The reply of the commit of the user's message is lost; run again, the commit found the
    # event stored and the run went on without it: the model answered the previous message.
    session = await stack.sessions.create_session(app_name="chat", user_id="u")
    key = ("chat", "u", session.id)
    await stack.start("chat", session.id, "first")
    assert await stack.service.drain(key)
    inv = await stack.start("chat", session.id, "second")
    stack.proxy.needle = stack.sessions._append_script.sha.encode()
    assert await stack.service.drain(key)
    assert stack.proxy.lost == 1

    assert (await stack.store.get("chat", inv)).status is InvocationStatus.COMPLETED
    stored = await stack.sessions.get_session(app_name="chat", user_id="u", session_id=session.id)
    assert [(e.author, e.content.parts[0].text) for e in stored.events[-2:]] == [
        ("user", "second"), ("agent", "reply to second")]


async def test_an_answer_whose_reply_is_lost_is_taken_once_not_refused(stack):
    # Run again, storing the answer found it stored and said "already answered": the caller
    # was refused an answer that was taken (and could not tell).
    key, inv, call = await stack.paused_on_approval()
    await stack.queue._redis.script_load(stack.queue._put_answers_and_push.script.source)
    stack.proxy.needle = stack.queue._put_answers_and_push.sha.encode()

    await stack.service.answer("approval", inv, call, {"approved": True})  # not refused
    assert stack.proxy.lost == 1
    assert await stack.service.drain(key)

    assert (await stack.store.get("approval", inv)).status is InvocationStatus.COMPLETED
    session = await stack.sessions.get_session(app_name="approval", user_id="u", session_id=key[2])
    answers = [r.response for e in session.events for r in e.get_function_responses()]
    assert answers == [{"approved": True}]


async def test_a_session_taken_by_a_lost_reply_is_worked_on_at_once(stack):
    # Run again, taking the session found its own lease and said "busy": the session's work
    # waited for the lease to run out (30 s by default) before anyone took it.
    session = await stack.sessions.create_session(app_name="chat", user_id="u")
    key = ("chat", "u", session.id)
    inv = await stack.start("chat", session.id, "hello")
    await stack.queue._redis.script_load(stack.queue._take.script.source)  # as after a drain
    stack.proxy.needle = stack.queue._take.sha.encode()

    assert await stack.service.drain(key)  # taken, not "held by another"
    assert stack.proxy.lost == 1
    assert (await stack.store.get("chat", inv)).status is InvocationStatus.COMPLETED


async def test_a_call_committed_by_a_lost_reply_before_a_cancel_gets_its_seal(stack, redis_client):
    # The call's commit ran, its reply was lost, a cancel came, and the commit ran again:
    # refused as cancelled, the run never held the call, and the invocation ended cancelled
    # with that call unanswered in the log (the session's next model request is refused).
    from orchestrator.distributed.models import WorkItem

    session = await stack.sessions.create_session(app_name="approval", user_id="u")
    key = ("approval", "u", session.id)
    inv = await stack.start("approval", session.id, "pay")
    await redis_client.script_load(stack.sessions._append_script.script.source)
    elsewhere = RedisSessionQueue(redis_client)

    async def cancel_meanwhile() -> None:  # as InvocationService.cancel: item, then flag
        await elsewhere.push(key, WorkItem(kind="cancel", invocation_id=inv))
        await RedisInvocationStore(redis_client).request_cancel("approval", inv)

    append = stack.sessions._append

    async def losing_the_calls_reply(session, event, fence, mirror):
        if event.get_function_calls() and stack.proxy.lost == 0:
            stack.proxy.needle = stack.sessions._append_script.sha.encode()
            stack.proxy.on_lost = cancel_meanwhile
        return await append(session, event, fence, mirror)

    stack.sessions._append = losing_the_calls_reply
    assert await stack.service.drain(key)
    assert stack.proxy.lost == 1

    assert (await stack.store.get("approval", inv)).status is InvocationStatus.CANCELLED
    stored = await stack.sessions.get_session(app_name="approval", user_id="u", session_id=session.id)
    calls = {c.id for e in stored.events for c in e.get_function_calls()}
    answers = [r.id for e in stored.events for r in e.get_function_responses()]
    assert calls and sorted(answers) == sorted(calls)  # each call sealed, once


async def test_an_answer_sent_again_after_the_invocation_went_on_is_taken_once(stack):
    # The first try stored the answer and its reply never came (Redis away past the client's
    # retries); an orchestrator resumed meanwhile and the invocation completed. Sent again
    # (the orchestrator's answer task retries), it was refused: "completed; takes no answers".
    from redis.exceptions import ConnectionError as RedisConnectionError

    from workers.tasks import _retrying

    key, inv, call = await stack.paused_on_approval()
    push_answers = stack.queue.push_answers
    tries = 0

    async def stored_then_reply_lost(*args, **kwargs):
        nonlocal tries
        tries += 1
        refused = await push_answers(*args, **kwargs)
        if tries == 1:
            await stack.service.drain(key)  # resumed meanwhile
            raise RedisConnectionError("Connection reset (after Redis ran the script)")
        return refused

    stack.queue.push_answers = stored_then_reply_lost
    await _retrying("Answering a call", lambda: stack.service.answer(
        "approval", inv, call, {"approved": True}))  # not refused

    assert tries == 1  # taken as done: not stored a second time
    assert (await stack.store.get("approval", inv)).status is InvocationStatus.COMPLETED
    with pytest.raises(Exception, match="completed"):  # another answer still is refused
        await stack.service.answer("approval", inv, call, {"approved": False})


async def test_a_submitted_invocation_whose_reply_is_lost_still_runs(stack):
    # The reply of the first command that records a new invocation is lost, the command
    # sent again. Recording and queueing its start were two steps: sent again, the first
    # found the record and the start was never queued, the invocation 'queued' for ever.
    session = await stack.sessions.create_session(app_name="chat", user_id="u")
    key = ("chat", "u", session.id)
    await stack.start("chat", session.id, "first")  # the scripts a submit runs are loaded
    assert await stack.service.drain(key)
    record = InvocationRecord(
        invocation_id=platform.new_invocation_id(), app_name="chat", user_id="u",
        session_id=session.id, new_message={"role": "user", "parts": [{"text": "second"}]})
    stack.proxy.needle = record.invocation_id.encode()
    await stack.service.submit(record)
    assert stack.proxy.lost == 1

    assert await stack.service.drain(key)
    assert (await stack.store.get("chat", record.invocation_id)).status is InvocationStatus.COMPLETED
    stored = await stack.sessions.get_session(app_name="chat", user_id="u", session_id=session.id)
    assert [e.content.parts[0].text for e in stored.events[-2:]] == ["second", "reply to second"]


async def test_a_drain_whose_last_step_lost_its_reply_ends_as_it_did(stack):
    # The reply of the step that saves the record and lets the lease go is lost, the step
    # sent again: it found the lease gone and the drain failed "lost the lease, the record
    # is not saved" though it was, to be retried.
    session = await stack.sessions.create_session(app_name="chat", user_id="u")
    key = ("chat", "u", session.id)
    await stack.start("chat", session.id, "first")
    assert await stack.service.drain(key)  # the scripts a drain runs are loaded
    inv = await stack.start("chat", session.id, "second")
    stack.proxy.needle = stack.queue._claim_or_release.sha.encode()
    assert await stack.service.drain(key)
    assert stack.proxy.lost == 1

    assert (await stack.store.get("chat", inv)).status is InvocationStatus.COMPLETED
    assert not await stack.queue._redis.exists(keys.session_lease(*key))
