"""Enqueueing on real Redis: the invoke task's path and the Client's, one transaction each."""

from __future__ import annotations

import pytest
import redis as sync_redis

from config import Settings
from orchestrator.backends.redis import keys as redis_keys
from orchestrator.distributed.models import InvocationStatus, WorkItem
from orchestrator.errors import SessionNotFoundError
from workers.client import Client
from workers.runtime import Runtime


def test_an_enqueue_creates_the_session_records_and_queues_in_one_go(redis_url):
    runtime = Runtime(Settings(redis_url=redis_url), load_apps=False)
    check = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    check.flushdb()
    try:
        check.script_flush()  # a Redis that restarted: the scripts are loaded on the way
        request = {"app_name": "chat", "user_id": "u", "new_message": "hi", "invocation_id": "e-9"}
        record, key = runtime.run(runtime.submit_invocation(request))
        assert record.status.value == "queued" and key == ("chat", "u", record.session_id)
        assert check.exists(redis_keys.session(*key)) == 1  # the new session exists
        again, _ = runtime.run(runtime.submit_invocation({**request, "session_id": key[2]}))
        assert again.model_dump() == record.model_dump()  # the same invocation, not a second
        assert check.llen(redis_keys.session_queue(*key)) == 1
        wake = redis_keys.wake_stream(runtime.settings.invocations_queue)
        assert [fields["inv"] for _, fields in check.xrange(wake)] == ["e-9"]
    finally:
        check.close()
        runtime.close()


def test_an_enqueue_that_needs_its_session_refuses_a_missing_one_and_writes_nothing(redis_url):
    runtime = Runtime(Settings(redis_url=redis_url), load_apps=False)
    check = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    check.flushdb()
    try:
        check.script_flush()  # the guarded script is loaded on the way too
        request = {"app_name": "chat", "user_id": "u", "session_id": "s-none", "new_message": "hi",
                   "invocation_id": "e-11"}
        for asked in (request, {**request, "new_message": {"parts": "not a message"}}):
            with pytest.raises(SessionNotFoundError):
                runtime.run(runtime.submit_invocation(asked, session_must_exist=True))
        assert check.keys("*") == []  # no record, no queue, no wake-up
        # Without the guard (the Client, the invoke task) the run fails later, as before.
        record, _ = runtime.run(runtime.submit_invocation(request))
        assert record.status is InvocationStatus.QUEUED
        _, key = runtime.run(runtime.submit_invocation(
            {"app_name": "chat", "user_id": "u", "new_message": "hi"}))
        guarded, _ = runtime.run(runtime.submit_invocation(
            {**request, "session_id": key[2], "invocation_id": "e-12"}, session_must_exist=True))
        assert guarded.status is InvocationStatus.QUEUED
        assert check.llen(redis_keys.session_queue(*key)) == 2
    finally:
        check.close()
        runtime.close()


def test_the_client_enqueues_from_its_own_thread_the_same_way(redis_url):
    client = Client(Settings(redis_url=redis_url))
    check = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    check.flushdb()
    try:
        check.script_flush()  # a Redis that restarted: the scripts are loaded on the way
        inv = client.enqueue("chat", "u", "hi", invocation_id="e-10")
        record = client.status("chat", inv)
        key = ("chat", "u", record.session_id)
        assert inv == "e-10" and record.status is InvocationStatus.QUEUED
        assert check.exists(redis_keys.session(*key)) == 1  # the new session exists
        assert client.enqueue("chat", "u", "hi", session_id=key[2], invocation_id=inv) == inv
        queued = [WorkItem.model_validate_json(raw)
                  for raw in check.lrange(redis_keys.session_queue(*key), 0, -1)]
        assert [(item.kind, item.invocation_id) for item in queued] == [("start", "e-10")]
        wake = redis_keys.wake_stream(client._settings.invocations_queue)
        assert [fields["inv"] for _, fields in check.xrange(wake)] == ["e-10"]
        # No orchestrator runs here: waiting for it to settle times out; queued is its state.
        with pytest.raises(TimeoutError):
            client.wait("chat", inv, timeout=0.2)
        assert client.wait("chat", inv, until=frozenset({InvocationStatus.QUEUED})) == record
        # Bad input still becomes a failed invocation, stored, that says what was wrong.
        bad = client.enqueue("chat", "u", {"role": "user", "parts": "nope"})  # type: ignore[arg-type]
        failed = client.status("chat", bad)
        assert failed.status is InvocationStatus.FAILED and "new_message" in failed.error
    finally:
        check.close()
        client.close()


def test_a_record_written_by_a_newer_orchestrator_is_still_read():
    from orchestrator.distributed.models import InvocationRecord

    raw = ('{"invocation_id": "e-1", "app_name": "a", "user_id": "u", "session_id": "s", '
           '"status": "paused", "pending_calls": ["c"], "field_from_a_later_version": 1}')
    record = InvocationRecord.model_validate_json(raw)  # a rolling upgrade must not break status
    assert record.pending_calls == ["c"]


def test_an_invoke_message_without_ids_gets_the_same_ids_at_every_delivery():
    from orchestrator.distributed.intake import Limits
    from workers.enqueue import prepare_invocation, with_message_ids

    for missing in ({}, {"invocation_id": ""}, {"invocation_id": None, "session_id": ""}):
        message = {"app_name": "a", "user_id": "u", "new_message": "hi", **missing}
        first, new = prepare_invocation(with_message_ids(message, "task-1"), Limits())
        again, _ = prepare_invocation(with_message_ids(message, "task-1"), Limits())
        other, _ = prepare_invocation(with_message_ids(message, "task-2"), Limits())
        assert new and (first.invocation_id, first.session_id) == (again.invocation_id,
                                                                    again.session_id)
        assert other.invocation_id != first.invocation_id
    given = {"app_name": "a", "user_id": "u", "new_message": "hi", "invocation_id": "e-mine"}
    assert prepare_invocation(with_message_ids(given, "task-1"), Limits())[0].invocation_id == "e-mine"


def test_an_enqueue_whose_session_create_redis_forgot_queues_nothing_without_its_session(
        redis_url):
    """Only some scripts cached (two versions of the project sharing one Redis server, a
    restart while the other version reloads its own): the session's create met NOSCRIPT
    and the record's script ran, so the invocation was queued with no session; sent again,
    the create was skipped (the invocation existed) and the invocation failed, "Session not
    found". Now nothing is stored unless the session is, and the second try makes both."""
    import redis as sync_redis

    from config import Settings
    from orchestrator.backends.redis import keys
    from orchestrator.backends.redis.session_queue_scripts import (
        CREATE_AND_PUSH,
        CREATE_AND_PUSH_IF_SESSION,
    )
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + "/13"
    check = sync_redis.Redis.from_url(url, decode_responses=True)
    check.flushdb()
    check.script_flush()
    for source in (CREATE_AND_PUSH.source, CREATE_AND_PUSH_IF_SESSION.source):
        check.script_load(source)  # cached; the session's create is not
    client = Client(Settings(redis_url=url, apps="tests.apps:chat_app"))
    try:
        inv = client.enqueue("chat", "u", "hello")
        record = client.status("chat", inv)
        assert check.exists(keys.session("chat", "u", record.session_id)) == 1
        assert check.llen(keys.session_queue("chat", "u", record.session_id)) == 1
    finally:
        client.close()
        check.close()
