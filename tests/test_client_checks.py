"""What ``Client`` refuses or says at once: unknown invocations, sessions and apps, malformed
ids, statuses and timeouts, a cancel with nothing to cancel; nothing is stored or sent then.

A real redis-server: Redis db 1, which no orchestrator serves (an invocation stays queued),
and, for what must run, real orchestrator and worker processes (``celery_stack``).
"""

from __future__ import annotations

import asyncio
import math

import pytest
import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from orchestrator.errors import InvocationNotFoundError, RequestError
from workers.client import Client


@pytest.fixture
def unserved(redis_url):
    """(client, check): a Client of Redis db 1 (flushed; no orchestrator) and a plain client."""
    url = redis_url.rsplit("/", 1)[0] + "/1"
    check = redis.Redis.from_url(url, decode_responses=True)
    check.flushdb()
    client = Client(Settings(redis_url=url))
    try:
        yield client, check
    finally:
        client.close()
        check.flushdb()
        check.close()


def other_client(client: Client, **options) -> Client:
    return Client(Settings(redis_url=client._settings.redis_url, **options))


def failed_invocation(client: Client) -> str:
    """An invocation that failed at once (its message is not a message): finished."""
    invocation_id = client.enqueue("chat", "u", {"parts": "not a message"})  # type: ignore[arg-type]
    assert client.status("chat", invocation_id).status is InvocationStatus.FAILED
    return invocation_id


# --- A: an unknown invocation, a malformed id ---------------------------------------------------


def test_wait_and_follow_say_at_once_that_an_invocation_does_not_exist(unserved):
    client, _ = unserved
    said = "^no invocation 'e-nope' of app 'chat'.$"
    with pytest.raises(InvocationNotFoundError, match=said):
        client.wait("chat", "e-nope", timeout=5)  # it waited 5 s, then "did not reach"
    with pytest.raises(InvocationNotFoundError, match=said):
        client.follow("chat", "e-nope", timeout=5)  # it blocked (for ever without a timeout)

    async def first_item() -> None:
        async for _ in client.afollow("chat", "e-nope", timeout=5):
            pass

    with pytest.raises(InvocationNotFoundError, match=said):
        asyncio.run(first_item())
    invocation_id = client.enqueue("chat", "u", "hi")
    with pytest.raises(InvocationNotFoundError, match=f"^no invocation '{invocation_id}' of app "
                                                      "'lookup'.$"):
        client.wait("lookup", invocation_id, timeout=5)  # another app's


@pytest.mark.parametrize(("invocation_id", "said"), [
    (None, "invocation_id: is required."),
    ("", "invocation_id: must not be empty."),
    ("e-1\x1b[2K", "invocation_id: 'e-1\\x1b[2K' has characters outside"),
    ("e" * 100_000, "invocation_id: is 100000 characters long, over the limit of 128"),
])
def test_follow_and_afollow_check_their_ids_when_called(unserved, invocation_id, said):
    client, _ = unserved
    for follow in (client.follow, client.afollow):
        with pytest.raises(RequestError) as refused:
            follow("chat", invocation_id, timeout=5)
        assert str(refused.value).startswith(said) and len(str(refused.value)) < 200


# --- I: until and timeout ------------------------------------------------------------------------


def test_until_and_timeout_are_checked_and_a_finished_invocation_ends_any_wait(unserved):
    client, _ = unserved
    queued = client.enqueue("chat", "u", "hi")
    assert client.wait("chat", queued, until=["queued"]).status is InvocationStatus.QUEUED
    assert client.wait("chat", queued, until="queued").status is InvocationStatus.QUEUED
    refusals = [
        (dict(until=["paused", "done"]), "until: 'done' is not a status (one of: queued, running, "
                                         "paused, completed, failed, cancelled)."),
        (dict(until=5), "until: must be a collection of statuses, not int."),
        (dict(timeout="5"), "timeout: must be a number of seconds (None or math.inf: no limit), "
                            "not str."),
        (dict(timeout=-1), "timeout: must be 0 or more seconds (None or math.inf: no limit), not -1."),
        (dict(timeout=-math.inf), "timeout: must be 0 or more seconds"),
    ]
    for options, said in refusals:
        for call in (client.wait, client.follow, client.afollow):
            with pytest.raises(RequestError) as refused:
                call("chat", queued, **options)
            assert str(refused.value).startswith(said), (call, options)
    # Finished, it never pauses: the wait returns it at once (it waited the whole timeout).
    failed = failed_invocation(client)
    record = client.wait("chat", failed, until={InvocationStatus.PAUSED}, timeout=5)
    assert record.status is InvocationStatus.FAILED


# --- E: a pause answered elsewhere --------------------------------------------------------------


def test_a_pause_another_client_answered_is_not_returned(celery_stack):
    waiter = celery_stack["client"]
    answerer = other_client(waiter)
    try:
        for _ in range(3):  # it returned the answered pause every time
            invocation_id = waiter.enqueue("approval", "two-clients", "pay 10")
            record = waiter.wait("approval", invocation_id, timeout=15)
            assert record.status is InvocationStatus.PAUSED
            answerer.answer("approval", invocation_id, record.pending_calls[0], {"approved": True})

            record = waiter.wait("approval", invocation_id, timeout=15)

            assert record.status is InvocationStatus.COMPLETED, record
    finally:
        answerer.close()


def test_a_pause_still_waiting_is_returned_at_once_every_time(celery_stack):
    client = celery_stack["client"]
    invocation_id = client.enqueue("approval", "twice", "pay 11")
    first = client.wait("approval", invocation_id, timeout=15)
    again = client.wait("approval", invocation_id, timeout=0)  # nothing changed: no need to block
    assert first.status is again.status is InvocationStatus.PAUSED
    assert again.pending_calls == first.pending_calls
