"""A cancel ends an invocation where it stands, and nothing of it is committed after it.

Over real processes: a cancel sent while the orchestrator waits on a model call or runs an
in-process tool (what that step produces afterwards is not committed, and the invocation
never ends ``completed``), and a cancel of an invocation paused on a call (the call gets an
error answer, so the session's next model call sees no call without a response).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.apps import APP_SPECS as BASE_SPECS
from tests.apps_cancel import APP_SPECS as CANCEL_SPECS
from tests.apps_cancel import gate_key, requests_key, started_key
from tests.support.processes import stack_env, start_celery_process

SPECS = f"{BASE_SPECS},{CANCEL_SPECS}"


@contextmanager
def _stack(redis_url: str, db: int, roles: tuple[str, ...] = ("orchestrator", "worker")
           ) -> Iterator[tuple[redis.Redis, Any, Callable[[str], None]]]:
    """Redis db ``db`` (flushed), a process of each of ``roles``, a client, and what starts
    one more process of a role."""
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + f"/{db}"
    check = redis.Redis.from_url(url, decode_responses=True, socket_timeout=60)
    check.flushdb()
    with ExitStack() as stack:
        stack.callback(check.close)
        env = stack_env(url, SPECS, lease_retry_seconds="0.2")

        def start(role: str) -> None:
            process = start_celery_process(role, f"{role}-{db}", env)
            stack.callback(process.stop)

        for role in roles:
            start(role)
        client = Client(Settings(redis_url=url, apps=SPECS))
        stack.callback(client.close)
        yield check, client, start


def _until_taken(check: redis.Redis, app: str, invocation_id: str) -> None:
    """Until an orchestrator took the cancel (its flag is set: nothing to wait on but it)."""
    from orchestrator.backends.redis import keys

    deadline = time.monotonic() + 20
    while not check.exists(keys.cancel_flag(app, invocation_id)):
        assert time.monotonic() < deadline, "the cancel was never taken"
        time.sleep(0.02)


def _state(check: redis.Redis, app: str, session_id: str) -> dict:
    from orchestrator.backends.redis import keys

    return check.hgetall(keys.session_state(app, "u", session_id))


def _texts(client, app: str, invocation_id: str) -> list:
    return [(e.author, p.text or (p.function_response and p.function_response.response))
            for e in client.events(app, invocation_id) for p in (e.content.parts if e.content else [])]


@pytest.mark.parametrize(("app", "what"), [("held_model", "model"), ("held_tool", "tool")])
def test_what_a_step_produces_after_a_cancel_is_not_committed(redis_url, app, what):
    with _stack(redis_url, 6) as (check, client, _):
        session = client.create_session(app, "u").id
        inv = client.enqueue(app, "u", "go c1", session_id=session)
        assert check.blpop([started_key("c1")], timeout=20)[1] == what  # the step is under way
        client.cancel(app, inv)
        _until_taken(check, app, inv)
        check.lpush(gate_key("c1"), "go on")  # the step ends after the cancel was taken

        record = client.wait(app, inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.CANCELLED
        assert _texts(client, app, inv) == [("user", "go c1")] + (
            [("agent", None)] if what == "tool" else [])  # the call, not its answer
        assert _state(check, app, session) == {}

        # The session goes on, and its next model call is shown nothing of the step.
        after = client.enqueue(app, "u", "then free2", session_id=session)
        assert client.wait(app, after, timeout=20,
                           until=InvocationStatus.FINISHED).status is InvocationStatus.COMPLETED
        shown = json.loads(check.lrange(requests_key("free2"), 0, -1)[-1])
        assert "answered c1" not in shown and not any(
            isinstance(item, list) and item[0] == "answer" for item in shown)


def test_a_cancelled_invocations_open_call_gets_an_error_answer(redis_url):
    with _stack(redis_url, 7) as (check, client, _):
        session = client.create_session("approval", "u").id
        inv = client.enqueue("approval", "u", "pay 100", session_id=session)
        record = client.wait("approval", inv, timeout=20)
        assert record.status is InvocationStatus.PAUSED
        [call_id] = record.pending_calls
        client.cancel("approval", inv)
        record = client.wait("approval", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.CANCELLED and record.pending_calls == []

        events = client.events("approval", inv)
        [seal] = [e for e in events if e.get_function_responses()]
        assert seal.error_code == "INVOCATION_CANCELLED"
        [answer] = seal.get_function_responses()
        assert (answer.id, answer.response) == (call_id, {"error": "Invocation was cancelled."})
        # The next invocation's model is shown the call with that answer (the approval app's
        # model reads it as the last answer it got).
        after = client.enqueue("approval", "u", "hello", session_id=session)
        record = client.wait("approval", after, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED
        assert client.events("approval", after)[-1].content.parts[0].text == (
            "approval: {'error': 'Invocation was cancelled.'}")


def test_a_wait_after_a_cancel_returns_a_status_that_came_after_it(redis_url):
    with _stack(redis_url, 7) as (_, client, _):
        inv = client.enqueue("approval", "u", "pay 100")
        assert client.wait("approval", inv, timeout=20).status is InvocationStatus.PAUSED
        assert client.cancel("approval", inv) is InvocationStatus.PAUSED
        # Not the pause the caller saw before it asked.
        assert client.wait("approval", inv, timeout=20).status is InvocationStatus.CANCELLED


def test_an_invocation_cancelled_while_queued_runs_nothing(redis_url):
    from orchestrator.backends.redis import keys

    with _stack(redis_url, 13, roles=("worker",)) as (check, client, start):
        inv = client.enqueue("lookup", "u", "look up Oslo")  # no orchestrator yet
        assert client.cancel("lookup", inv) is InvocationStatus.QUEUED
        assert check.exists(keys.cancel_flag("lookup", inv))  # set by the cancel itself

        start("orchestrator")
        record = client.wait("lookup", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.CANCELLED
        assert client.events("lookup", inv) == []  # not even its message: nothing of it ran
        assert not check.exists(keys.invocation_jobs("lookup", inv))  # no tool job sent
