"""What ``Client`` refuses or says at once: unknown invocations, sessions and apps, malformed
ids, statuses and timeouts, a cancel with nothing to cancel; nothing is stored or sent then.
And which status its ``wait`` returns when a pause is over already.

A real redis-server: Redis db 1, which no orchestrator serves (an invocation stays queued),
and, for what must run, real orchestrator and worker processes (``celery_stack``).
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from typing import Any

import pytest
import redis

from config import Settings
from orchestrator.backends.redis import keys
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.errors import InvocationNotFoundError, RequestError, SessionNotFoundError
from tests.support.polling import eventually
from tests.support.redis_server import free_port
from workers.client import Client, InvocationFinishedError

BROKER_QUEUE = "adk.invocations"
"""The Redis list the ``adk_celery.invoke`` tasks wait in (nothing consumes db 1)."""


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


def _blocked_in_xread(check: redis.Redis) -> bool:
    """True once some connection is blocked in an ``XREAD`` (the waiting client's)."""
    return any(c.get("cmd") == "xread" and "b" in c.get("flags", "") for c in check.client_list())


def _status_entry(check: Any, record: InvocationRecord) -> None:
    """Queue the status entry an orchestrator adds with a saved record (record included)."""
    check.xadd(keys.invocation_statuses(record.app_name, record.invocation_id), {
        "kind": "status", "status": record.status.value, "record": record.model_dump_json(),
    })


def test_a_pause_read_together_with_the_status_after_it_is_not_returned(unserved):
    """The pause was over before the client saw it: it gets the end, as it would one read later."""
    client, check = unserved
    invocation_id = client.enqueue("chat", "u", "hello")
    queued = client.status("chat", invocation_id)
    assert queued.status is InvocationStatus.QUEUED
    got: dict[str, Any] = {}

    def wait() -> None:
        try:
            got["record"] = client.wait("chat", invocation_id, timeout=30,
                                        until={InvocationStatus.PAUSED})
        except BaseException as error:  # handed to the test's thread
            got["error"] = error

    waiter = threading.Thread(target=wait)
    waiter.start()
    eventually("the client blocked in its read of the status stream",
               lambda: _blocked_in_xread(check))
    paused = queued.model_copy(update={"status": InvocationStatus.PAUSED})
    completed = queued.model_copy(update={"status": InvocationStatus.COMPLETED})
    with check.pipeline(transaction=True) as pipe:
        _status_entry(pipe, paused)
        _status_entry(pipe, completed)
        pipe.hset(keys.invocation("chat", invocation_id), "record", completed.model_dump_json())
        pipe.execute()
    waiter.join(30)
    assert not waiter.is_alive()
    assert "error" not in got, got.get("error")
    assert got["record"].status is InvocationStatus.COMPLETED


# --- B, C, D, F: what an enqueue checks before it stores or sends anything ----------------------


def test_an_enqueue_through_celery_is_checked_first_and_shows_only_identifiers(unserved):
    client, check = unserved
    via_celery = other_client(client)
    via_celery._via_celery = True
    try:
        for app, user, options, field in [
            ("a b", "u", {}, "app_name"), ("x" * 1000, "u", {}, "app_name"),
            ("chat", None, {}, "user_id"), ("chat", "u", {"invocation_id": "e 1"}, "invocation_id"),
            ("chat", "u", {"invocation_id": ""}, "invocation_id"),
            ("chat", "u", {"session_id": ""}, "session_id"),
        ]:
            with pytest.raises(RequestError, match=f"^{field}: "):
                via_celery.enqueue(app, user, "hi", **options)
        with pytest.raises(SessionNotFoundError, match="^session_id: no session 'no-such'"):
            via_celery.enqueue("chat", "u", "hi", session_id="no-such")
        assert check.llen(BROKER_QUEUE) == 0  # nothing was sent

        invocation_id = via_celery.enqueue("chat", "u", "my secret text",
                                           state_delta={"k": "my secret state"})
        [message] = [json.loads(raw) for raw in check.lrange(BROKER_QUEUE, 0, -1)]
        shown = message["headers"]["kwargsrepr"]
        assert invocation_id in shown and "'user_id': 'u'" in shown and "secret" not in shown
        assert "secret" not in message["headers"]["argsrepr"]
        # Sent, not yet recorded (no orchestrator took it): this client waits for it...
        with pytest.raises(TimeoutError):
            via_celery.wait("chat", invocation_id, timeout=0.2)
        # ... another knows nothing of it yet.
        with pytest.raises(InvocationNotFoundError):
            client.wait("chat", invocation_id, timeout=0.2)
        # A refused payload is recorded failed at once, never sent.
        failed = failed_invocation(via_celery)
        assert "new_message" in client.status("chat", failed).error
        assert check.llen(BROKER_QUEUE) == 1
    finally:
        via_celery.close()


def test_an_enqueue_for_a_session_that_does_not_exist_stores_nothing(unserved):
    client, check = unserved
    session = client.create_session("chat", "someone-else")
    before = sorted(check.keys("*"))
    said = "^session_id: no session 'no-such' of app 'chat', user 'u' \\(leave it out for a new session\\).$"
    with pytest.raises(SessionNotFoundError, match=said):
        client.enqueue("chat", "u", "hi", session_id="no-such")
    with pytest.raises(SessionNotFoundError, match=said):  # a refused message too
        client.enqueue("chat", "u", {"parts": "x"}, session_id="no-such")  # type: ignore[arg-type]
    with pytest.raises(SessionNotFoundError):  # another user's session
        client.enqueue("chat", "u", "hi", session_id=session.id)
    assert sorted(check.keys("*")) == before  # no record, no queue, no wake-up
    # An existing session is used.
    mine = client.create_session("chat", "u")
    invocation_id = client.enqueue("chat", "u", "hi", session_id=mine.id)
    assert client.status("chat", invocation_id).session_id == mine.id


def test_an_empty_session_id_or_user_id_is_refused(unserved):
    client, check = unserved
    with pytest.raises(RequestError, match="^session_id: must not be empty"):
        client.enqueue("chat", "u", "hi", session_id="")
    with pytest.raises(RequestError, match="^invocation_id: must not be empty"):
        client.enqueue("chat", "u", "hi", invocation_id="")
    with pytest.raises(RequestError, match="^user_id: must not be empty"):
        client.list_sessions("chat", "")
    assert check.keys("*") == []


def test_a_client_that_knows_its_apps_refuses_another_name(unserved):
    client, check = unserved
    knowing = other_client(client, apps="tests.apps:chat_app,tests.apps:approval_app")
    try:
        said = ("^app_name: 'tripplanner' is not an app of this client \\(ADK_CELERY_APPS: "
                "approval, chat\\).$")
        with pytest.raises(RequestError, match=said):
            knowing.enqueue("tripplanner", "u1", "hi")
        with pytest.raises(RequestError, match=said):
            knowing.create_session("tripplanner", "u1")
        assert check.keys("*") == []  # no session, no failed record
        assert knowing.status("chat", knowing.enqueue("chat", "u1", "hi")).status is (
            InvocationStatus.QUEUED)
    finally:
        knowing.close()
    # A client configured without apps checks no name: the orchestrator fails the invocation.
    assert client.status("tripplanner", client.enqueue("tripplanner", "u1", "hi")).status is (
        InvocationStatus.QUEUED)


# --- H: cancel -------------------------------------------------------------------------------------


def test_cancel_says_what_it_did_or_why_not(unserved):
    client, check = unserved
    with pytest.raises(InvocationNotFoundError, match="^no invocation 'e-nope' of app 'chat'.$"):
        client.cancel("chat", "e-nope")
    failed = failed_invocation(client)
    with pytest.raises(InvocationFinishedError,
                       match=f"^invocation '{failed}' is failed; it cannot be cancelled.$"):
        client.cancel("chat", failed)
    assert not check.exists(keys.cancel_flag("chat", failed))

    assert check.llen(BROKER_QUEUE) == 0  # nothing was sent

    queued = client.enqueue("chat", "u", "hi")
    assert client.cancel("chat", queued) is InvocationStatus.QUEUED
    # Written for an orchestrator to record, as the API's cancel: nothing goes by the broker.
    assert check.exists(keys.cancel_flag("chat", queued))
    assert check.llen(BROKER_QUEUE) == 0


def test_cancel_with_redis_out_of_reach_is_a_connection_error():
    client = Client(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    try:
        # It was Celery's "Retry limit exceeded ... must be restarted", after 19 s.
        with pytest.raises(redis.ConnectionError):
            client.cancel("chat", "e-1")
    finally:
        client.close()


# --- K: the README's follow example -----------------------------------------------------------------


def test_the_readmes_follow_example_runs_over_progress_items(celery_stack, capsys):
    import re

    from tests.support.processes import ROOT

    [example] = [block for block in re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(),
                                               re.MULTILINE | re.DOTALL) if "client.follow(" in block]
    example = example.replace('"trip_planner"', '"lookup"').replace("Plan 3 nights in Lisbon",
                                                                    "look up Oslo")
    client = celery_stack["client"]

    class Finished:
        """The client, whose enqueue returns once the invocation finished: the follow replays
        all of it (its remote call's progress too) to its end."""

        def enqueue(self, app_name, *args, **options):
            invocation_id = client.enqueue(app_name, *args, **options)
            client.wait(app_name, invocation_id, timeout=30, until=InvocationStatus.FINISHED)
            return invocation_id

        follow = staticmethod(client.follow)

    exec(example, {"client": Finished()})  # it crashed on the progress item (no status)
    printed = capsys.readouterr().out.splitlines()
    assert "progress: slow_lookup {'step': 'looking', 'city': 'Oslo'}" in printed
    assert printed[-1] == "status: completed"
