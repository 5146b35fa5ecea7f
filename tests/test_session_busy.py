"""A new message waits while the session's invocation waits for its own workers.

An invocation paused on calls only its workers answer (a plain tool sent to workers, a
parallel branch) is still answering its message, as it would be in process, where the tool
call blocks. A second message to the session used to run in that pause, and the first one's
model then answered with the second message in its history. Paused on a call answered from
outside (a long-running tool), the next message runs, as in google-adk.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.backends.memory.stores import InMemoryInvocationStore, InMemorySessionQueue
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.session_queue import RedisSessionQueue
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, WorkItem
from orchestrator.distributed.stores import SessionQueue

KEY = ("app", "u", "s")


def _record(inv: str, status: InvocationStatus, *, inside: bool) -> InvocationRecord:
    record = InvocationRecord(invocation_id=inv, app_name="app", user_id="u", session_id="s",
                              status=status)
    if status is InvocationStatus.PAUSED:
        record.pending_calls = ["c1"]
        record.inside_calls = ["c1"] if inside else []
    return record


@pytest.fixture(params=["memory", "redis"])
def queue(request, redis_client) -> Iterator[SessionQueue]:
    if request.param == "memory":
        return InMemorySessionQueue(InMemoryInvocationStore())
    RedisInvocationStore(redis_client)  # the queue saves records as the store does
    return RedisSessionQueue(redis_client)


def _same(item: WorkItem | None, expected: WorkItem) -> bool:
    return item is not None and (item.kind, item.invocation_id, item.item_id) == (
        expected.kind, expected.invocation_id, expected.item_id)


async def _pause_first(queue: SessionQueue, *, inside: bool) -> WorkItem:
    """A's start taken, B's start queued meanwhile, A paused: what the drain claims next."""
    start_a = WorkItem(kind="start", invocation_id="e-a")
    await queue.push(KEY, start_a)
    taken = await queue.take(KEY)
    assert taken is not None and _same(taken.item, start_a)
    await queue.push(KEY, WorkItem(kind="start", invocation_id="e-b"))
    return await queue.claim_or_release(
        KEY, taken.token, finished=start_a,
        save=_record("e-a", InvocationStatus.PAUSED, inside=inside))


async def test_a_new_message_is_held_until_the_invocation_before_it_is_done(queue):
    assert await _pause_first(queue, inside=True) is None  # B held, the lease let go

    resume_a = WorkItem(kind="resume", invocation_id="e-a")
    await queue.push(KEY, resume_a)  # A's worker answered
    taken = await queue.take(KEY)
    assert taken is not None and _same(taken.item, resume_a)
    after = await queue.claim_or_release(KEY, taken.token, finished=resume_a,
                                         save=_record("e-a", InvocationStatus.COMPLETED, inside=True))
    assert after is not None and (after.kind, after.invocation_id) == ("start", "e-b")


async def test_a_pause_on_an_answer_from_outside_lets_the_next_message_run(queue):
    after = await _pause_first(queue, inside=False)
    assert after is not None and (after.kind, after.invocation_id) == ("start", "e-b")


async def test_a_cancel_is_not_held(queue):
    assert await _pause_first(queue, inside=True) is None
    cancel_b = WorkItem(kind="cancel", invocation_id="e-b")
    await queue.push(KEY, cancel_b)
    taken = await queue.take(KEY)
    assert taken is not None and _same(taken.item, cancel_b)


async def _step(queue: SessionQueue, item: WorkItem, saved: InvocationRecord) -> WorkItem | None:
    """Push ``item``, take the session, finish the item saving ``saved``: what comes next."""
    await queue.push(KEY, item)
    taken = await queue.take(KEY)
    assert taken is not None and _same(taken.item, item), taken
    return await queue.claim_or_release(KEY, taken.token, finished=item, save=saved)


async def test_two_invocations_waiting_for_their_workers_both_hold_new_messages(queue):
    # A waits for a human; B starts and waits for its worker; C is held. A's answer comes,
    # A goes to its worker and finishes: C used to come back though B still waited.
    S = InvocationStatus
    await queue.push(KEY, WorkItem(kind="start", invocation_id="e-a"))
    taken = await queue.take(KEY)
    await queue.push(KEY, WorkItem(kind="start", invocation_id="e-b"))
    after = await queue.claim_or_release(KEY, taken.token, finished=taken.item,
                                         save=_record("e-a", S.PAUSED, inside=False))
    assert after is not None and after.invocation_id == "e-b"
    assert await queue.claim_or_release(KEY, taken.token, finished=after,
                                        save=_record("e-b", S.PAUSED, inside=True)) is None
    await queue.push(KEY, WorkItem(kind="start", invocation_id="e-c"))
    assert (await queue.take(KEY)).item is None  # held
    assert await _step(queue, WorkItem(kind="resume", invocation_id="e-a"),
                       _record("e-a", S.PAUSED, inside=True)) is None
    assert await _step(queue, WorkItem(kind="resume", invocation_id="e-a"),
                       _record("e-a", S.COMPLETED, inside=True)) is None  # B still waits
    after = await _step(queue, WorkItem(kind="resume", invocation_id="e-b"),
                        _record("e-b", S.COMPLETED, inside=True))
    assert after is not None and (after.kind, after.invocation_id) == ("start", "e-c")


async def test_held_messages_come_back_once_nobody_is_busy_any_more(redis_client):
    # The busy mark expires with its invocation's record (or a save never came): the held
    # messages used to stay held for ever, and a newer message ran ahead of them.
    from orchestrator.backends.redis import keys

    queue = RedisSessionQueue(redis_client)
    assert await _pause_first(queue, inside=True) is None  # B held
    await redis_client.delete(keys.session_busy(*KEY))
    await queue.push(KEY, WorkItem(kind="start", invocation_id="e-d"))
    taken = await queue.take(KEY)
    assert taken is not None and (taken.item.kind, taken.item.invocation_id) == ("start", "e-b")
