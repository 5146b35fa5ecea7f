"""Deleting a session ends its unfinished invocations: none waits for ever.

A message queued for a session that is then deleted ends ``failed`` (SessionNotFoundError).
So do a message held behind an invocation paused on its workers' calls (the delete used to
drop the held list: it stayed ``queued`` for ever) and an invocation that ran and is paused
(it used to stay ``paused``, refusing every answer with "No call ... in the session log").
"""

from __future__ import annotations

import pytest
import redis

from orchestrator.backends.memory.stores import InMemoryInvocationStore, InMemorySessionQueue
from orchestrator.backends.redis import keys
from orchestrator.distributed.invocation_lists import InvocationQuery
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, WorkItem
from orchestrator.errors import AnswerRejectedError
from tests.support.backends import EmbeddedBackend
from tests.support.polling import eventually


def _delete(client, app: str, user: str, session_id: str) -> None:
    """Delete through the client's own session service (as the API's DELETE route does)."""
    sessions = client._services().sessions
    client._runtime.run(sessions.delete_session(app_name=app, user_id=user, session_id=session_id))


def test_a_message_held_behind_a_busy_invocation_fails_when_its_session_is_deleted(celery_stack):
    client = celery_stack["client"]
    session_id = client.create_session("parked_plain", "held-delete").id
    # A plain tool's call on a queue no worker reads: the invocation waits for its worker.
    busy = client.enqueue("parked_plain", "held-delete", "busy", session_id=session_id)
    record = client.wait("parked_plain", busy, timeout=30)
    assert record.status is InvocationStatus.PAUSED and record.inside_calls
    held = client.enqueue("parked_plain", "held-delete", "held", session_id=session_id)
    # The next drain holds it aside (and acknowledges the session's wake-up).
    check = redis.Redis.from_url(celery_stack["url"])
    held_key = keys.session_held("parked_plain", "held-delete", session_id)
    eventually("the message held", lambda: check.llen(held_key) == 1)

    _delete(client, "parked_plain", "held-delete", session_id)

    record = client.wait("parked_plain", held, timeout=30, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.FAILED
    assert record.error.startswith("SessionNotFoundError"), record.error
    record = client.wait("parked_plain", busy, timeout=30, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.FAILED
    assert "session was deleted" in record.error and session_id in record.error, record.error


def test_an_invocation_paused_for_an_answer_fails_when_its_session_is_deleted(celery_stack):
    client = celery_stack["client"]
    session_id = client.create_session("approval", "paused-delete").id
    inv = client.enqueue("approval", "paused-delete", "pay 100", session_id=session_id)
    record = client.wait("approval", inv, timeout=30)
    assert record.status is InvocationStatus.PAUSED
    [call] = record.pending_calls

    _delete(client, "approval", "paused-delete", session_id)

    record = client.wait("approval", inv, timeout=30, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.FAILED and record.pending_calls == []
    assert record.error.startswith("SessionNotFoundError") and "session was deleted" in record.error
    with pytest.raises(AnswerRejectedError, match="failed"):
        client.answer("approval", inv, call, {"approved": True})
    # Deleting the session deleted its list of invocations: the record saved as the
    # invocation ended made it again, and a new session of that id listed the old invocation.
    client.create_session("approval", "paused-delete", session_id=session_id)
    page = client.invocations("approval", user_id="paused-delete", session_id=session_id)
    assert page.records == []
    assert [r.invocation_id for r in client.invocations(
        "approval", status=InvocationStatus.FAILED).records].count(inv) == 1


async def test_embedded_an_invocation_paused_for_an_answer_fails_when_its_session_is_deleted():
    backend = EmbeddedBackend()
    session_id = await backend.create_session("approval", "u")
    inv = await backend.enqueue("approval", "u", "pay 100", session_id=session_id)
    assert (await backend.wait("approval", inv)).status is InvocationStatus.PAUSED

    await backend.rt.session_service.delete_session(app_name="approval", user_id="u",
                                                    session_id=session_id)

    record = await backend.wait("approval", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.FAILED
    assert record.error.startswith("SessionNotFoundError") and "session was deleted" in record.error


async def test_embedded_a_new_session_of_a_deleted_ones_id_lists_none_of_its_invocations():
    backend = EmbeddedBackend()
    session_id = await backend.create_session("approval", "u")
    paused = await backend.enqueue("approval", "u", "pay 100", session_id=session_id)
    assert (await backend.wait("approval", paused)).status is InvocationStatus.PAUSED
    query = InvocationQuery(app_name="approval", user_id="u", session_id=session_id)
    assert [r.invocation_id for r in (await backend.rt.store.list_invocations(query)).records] \
        == [paused]

    await backend.rt.session_service.delete_session(app_name="approval", user_id="u",
                                                    session_id=session_id)
    assert (await backend.wait("approval", paused, until=InvocationStatus.FINISHED)).status \
        is InvocationStatus.FAILED
    await backend.rt.session_service.create_session(app_name="approval", user_id="u",
                                                    session_id=session_id)

    # Saved after the delete, the paused one's end does not list it again either.
    assert (await backend.rt.store.list_invocations(query)).records == []
    by_status = InvocationQuery(app_name="approval", status=InvocationStatus.FAILED)
    assert paused in {r.invocation_id for r in
                      (await backend.rt.store.list_invocations(by_status)).records}


async def test_in_memory_a_deleted_sessions_held_messages_go_back_to_its_queue():
    key = ("app", "u", "s")
    store = InMemoryInvocationStore()
    queue = InMemorySessionQueue(store)
    busy = InvocationRecord(invocation_id="e-a", app_name="app", user_id="u", session_id="s",
                            status=InvocationStatus.PAUSED, pending_calls=["c1"],
                            inside_calls=["c1"])
    await store.create(busy)
    start_a = WorkItem(kind="start", invocation_id="e-a")
    await queue.push(key, start_a)
    taken = await queue.take(key)
    assert taken is not None
    await queue.push(key, WorkItem(kind="start", invocation_id="e-b"))
    # A pauses on its workers' call: B's start is held, the lease let go.
    assert await queue.claim_or_release(key, taken.token, finished=start_a, save=busy) is None

    assert queue.session_deleted(key)

    taken = await queue.take(key)
    assert taken is not None and taken.item is not None
    assert (taken.item.kind, taken.item.invocation_id) == ("start", "e-b")
    after = await queue.claim_or_release(key, taken.token, finished=taken.item)
    assert after is not None and (after.kind, after.invocation_id) == ("session_deleted", "e-a")
