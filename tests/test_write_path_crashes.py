"""Processes killed at write steps no other fault test stops at: each invocation still ends once.

The gaps a crash-point audit of the write paths found (each step's failpoint is in the code
next to the write):

- a worker killed once its result is stored with its resume, before its task's message is
  acknowledged (``worker.result_stored``): the broker delivers the message again, and the
  copy must be skipped, not run again (an answered result, or a placeholder that waits for
  an answer from outside);
- a worker killed once it has claimed a job, before the tool ran (``worker.claimed``): the
  journal says the attempt runs on a worker that never beats; the watchdog must take it
  for dead and send the job again, and the tool run once;
- an orchestrator whose watchdog counted a lost attempt of a call and died before sending
  it again (``watchdog.attempt_counted``): the heir's watchdog must send it, once, and the
  attempt be counted once;
- an orchestrator killed once the start's user message is committed (the record saved
  ``running`` with it), before any agent committed anything (``runner.message_committed``):
  the heir must start the run, once, whatever the root agent is. A non-resumable app with a
  workflow root (a SequentialAgent) used to end ``failed`` there ("make it resumable"),
  though none of its agents had committed anything (any kill during its first model call).
"""

from __future__ import annotations

import json
from collections import Counter
from contextlib import ExitStack
from typing import Any

import pytest
import redis

from config import Settings
from orchestrator.backends.redis import keys
from orchestrator.distributed.models import InvocationStatus
from tests.apps import APP_SPECS, PARKED_QUEUE
from tests.apps_extra import APP_SPECS as EXTRA_SPECS
from tests.apps_extra import gate_key, runs_key
from tests.support.polling import eventually
from tests.support.processes import ManagedProcess, stack_env, start_celery_process
from tests.test_crash_recovery import (
    _assert_answered_once,
    _doomed_orchestrator,
    _stack,
    _unacked_on,
)

SPECS = f"{APP_SPECS},{EXTRA_SPECS}"
FAST_WATCH = {"job_heartbeat_seconds": "0.3", "job_lost_after_seconds": "1",
              "watchdog_interval_seconds": "0.2", "lease_retry_seconds": "0.2"}
REDELIVER = {"visibility_timeout_seconds": "2",
             "broker_transport_options": json.dumps({"unacked_restore_interval": 0.5,
                                                     "unacked_restore_throttle": 1})}
"""A killed worker's unacknowledged message goes back to its queue ~2.5 s later."""


def _db(redis_url: str, db: int) -> tuple[str, redis.Redis]:
    url = redis_url.rsplit("/", 1)[0] + f"/{db}"
    check = redis.Redis.from_url(url, decode_responses=True, socket_timeout=60)  # long BLPOPs
    check.flushdb()
    return url, check


def _started(stack: ExitStack, kind: str, name: str, env: dict[str, str], *extra: str
             ) -> ManagedProcess:
    process = start_celery_process(kind, name, env, *extra)
    stack.callback(process.stop)
    return process


def _client(stack: ExitStack, url: str, apps: str = SPECS) -> Any:
    from workers.client import Client

    client = Client(Settings(redis_url=url, apps=apps, lease_retry_seconds=0.2))
    stack.callback(client.close)
    return client


def _killed(process: ManagedProcess) -> None:
    process.proc.wait(30)
    assert process.proc.returncode == -9, process.output()  # killed by its failpoint


def _with_a_doomed_worker(stack: ExitStack, url: str, env: dict[str, str], failpoint: str
                          ) -> tuple[ManagedProcess, ManagedProcess, Any]:
    """An orchestrator, a worker that dies at ``failpoint``, and a client."""
    orchestrator = _started(stack, "orchestrator", "orch", env)
    doomed = _started(stack, "worker", "doomed-worker",
                      {**env, "ADK_CELERY_FAILPOINTS": f"{failpoint}=kill"})
    return orchestrator, doomed, _client(stack, url)


def lost_job_under_a_doomed_watchdog(stack: ExitStack, url: str, check: redis.Redis,
                                     env: dict[str, str], failpoint: str) -> tuple[Any, str]:
    """A ``parked`` invocation whose job's message is lost (popped, as by a worker killed
    right after taking it), under an orchestrator killed at ``failpoint`` as its watchdog
    handles the loss; returns the client and the invocation id."""
    doomed = _started(stack, "orchestrator", "doomed",
                      {**env, "ADK_CELERY_FAILPOINTS": f"{failpoint}=kill"})
    client = _client(stack, url)
    inv = client.enqueue("parked", "u", "lost-once")
    assert client.wait("parked", inv, timeout=20).status is InvocationStatus.PAUSED
    eventually("the job in its queue", lambda: check.llen(PARKED_QUEUE))
    assert check.lpop(PARKED_QUEUE) is not None
    _killed(doomed)
    return client, inv


def _nothing_left_unacked(check: redis.Redis) -> bool:
    """No tool job's message waits in its queue, or unacknowledged."""
    return not check.llen("adk.tools") and not _unacked_on(check, "adk.tools")


def test_a_worker_killed_after_storing_its_result_is_not_run_again(redis_url):
    url, check = _db(redis_url, 3)
    env = stack_env(url, SPECS, **FAST_WATCH, **REDELIVER)
    with ExitStack() as stack:
        stack.callback(check.close)
        orchestrator, doomed, client = _with_a_doomed_worker(stack, url, env, "worker.result_stored")

        inv = client.enqueue("fragile", "u", "go")
        started = check.blpop([runs_key(inv)], timeout=20)
        assert started is not None, doomed.output()
        check.lpush(gate_key(inv), "test")  # the tool returns; its worker stores it and dies
        _killed(doomed)
        heir = _started(stack, "worker", "heir-worker", env)

        record = client.wait("fragile", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, orchestrator.output())
        events = client.events("fragile", inv)
        [answer] = [r for e in events for r in e.get_function_responses()]
        assert answer.response["pid"] == doomed.pid  # the stored result is the answer
        # The message comes back (never acknowledged): its copy is skipped, not run again.
        heir.wait_for_line(lambda line: "Skipped call" in line and "already answered" in line,
                           timeout=60)
        eventually("the copy acknowledged", lambda: _nothing_left_unacked(check), timeout=20)
        assert not check.llen(runs_key(inv))  # no run but the first (popped above) ...
        assert check.lrange(runs_key(inv) + ":attempts", 0, -1) == ["1"]  # ... its attempt 1
        assert check.hget(keys.invocation_jobs("fragile", inv), f"a:{answer.id}") == "1"
        assert [e.content.parts[0].text for e in events if e.author == "agent"
                and e.content and e.content.parts[0].text] == [
            f"done on {doomed.pid} released=True"]


def test_a_worker_killed_after_storing_a_placeholder_is_not_run_again(redis_url):
    """A tool that returned nothing (the call waits for an answer from outside)."""
    url, check = _db(redis_url, 3)
    env = stack_env(url, SPECS, **FAST_WATCH, **REDELIVER)
    with ExitStack() as stack:
        stack.callback(check.close)
        orchestrator, doomed, client = _with_a_doomed_worker(stack, url, env, "worker.result_stored")

        inv = client.enqueue("approval", "u", "pay")
        _killed(doomed)
        heir = _started(stack, "worker", "heir-worker", env)
        heir.wait_for_line(lambda line: "Skipped call" in line and "waits for an answer" in line,
                           timeout=60)
        eventually("the copy acknowledged", lambda: _nothing_left_unacked(check), timeout=20)
        [call] = client.calls("approval", inv)
        assert call.where == "waiting for an answer"
        jobs = keys.invocation_jobs("approval", inv)
        assert check.hget(jobs, f"a:{call.function_call_id}") == "1"  # not sent again

        client.answer("approval", inv, call.function_call_id, {"approved": True})
        record = client.wait("approval", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, orchestrator.output())
        assert [(r.id, r.response) for e in client.events("approval", inv)
                for r in e.get_function_responses()] == [(call.function_call_id, {"approved": True})]


def test_a_worker_killed_right_after_claiming_a_job_is_taken_for_dead_and_runs_it_once(redis_url):
    # The broker's own redelivery is an hour away (the default visibility timeout): only the
    # watchdog can bring the job back.
    url, check = _db(redis_url, 4)
    env = stack_env(url, SPECS, **FAST_WATCH)
    with ExitStack() as stack:
        stack.callback(check.close)
        orchestrator, doomed, client = _with_a_doomed_worker(stack, url, env, "worker.claimed")

        inv = client.enqueue("fragile", "u", "go")
        _killed(doomed)
        assert not check.llen(runs_key(inv))  # claimed, never started
        heir = _started(stack, "worker", "heir-worker", env)
        started = check.blpop([runs_key(inv)], timeout=30)  # sent again by the watchdog
        assert started is not None, (orchestrator.output(), heir.output())
        check.lpush(gate_key(inv), "test")

        record = client.wait("fragile", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, orchestrator.output())
        [answer] = [r for e in client.events("fragile", inv) for r in e.get_function_responses()]
        assert answer.response["pid"] == heir.pid
        assert started[1] == f"{heir.pid} {answer.id}"
        assert check.lrange(runs_key(inv) + ":attempts", 0, -1) == ["2"]  # attempt 1 never ran
        jobs = keys.invocation_jobs("fragile", inv)
        assert check.hget(jobs, f"k:{answer.id}") == "1"  # its worker's death counted once


@pytest.mark.parametrize(("app", "message", "finals"), [
    ("lookup", "find Oslo", None),  # an LlmAgent root, not resumable, a call on a worker
    ("parallel", "find Oslo", None),  # resumable: a SequentialAgent over a ParallelAgent
    # Not resumable, a workflow root: failed with "make it resumable" before the fix.
    ("steps_chat", "hello", [("first", "first done"), ("second", "second done")]),
])
def test_an_orchestrator_killed_after_committing_the_users_message_runs_the_invocation_once(
    redis_url, app, message, finals
):
    apps = f"{APP_SPECS},tests.apps:steps_chat_app"
    url, env, armed = _stack(redis_url, 8, "runner.message_committed=kill", apps=apps)
    with ExitStack() as stack:
        doomed, client = _doomed_orchestrator(stack, url, env, armed, apps)
        inv = client.enqueue(app, "u", message)
        _killed(doomed)
        record = client.status(app, inv)
        assert record.status is InvocationStatus.RUNNING  # saved with the user's message
        heir = _started(stack, "orchestrator", "heir", env)

        record = client.wait(app, inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record, heir.output())
        events = client.events(app, inv)
        assert [e.content.parts[0].text for e in events if e.author == "user"] == [message]
        if finals is None:
            _assert_answered_once(events, app)
        else:
            texts = [(e.author, e.content.parts[0].text) for e in events
                     if e.author != "user" and e.content and e.content.parts[0].text]
            assert texts == finals
            assert Counter(e.author for e in events) == Counter(
                {"user": 1, "first": 1, "second": 1})


def test_a_watchdog_killed_between_counting_a_lost_job_and_sending_it_again(redis_url):
    url, check = _db(redis_url, 5)
    env = stack_env(url, SPECS, **FAST_WATCH)
    with ExitStack() as stack:
        stack.callback(check.close)
        client, inv = lost_job_under_a_doomed_watchdog(
            stack, url, check, env, "watchdog.attempt_counted")  # it counted the lost attempt
        [call] = client.calls("parked", inv)
        jobs = keys.invocation_jobs("parked", inv)
        assert (call.attempt, check.hget(jobs, f"l:{call.function_call_id}")) == (1, "1")
        _started(stack, "orchestrator", "heir", env)
        eventually("attempt 2 sent", lambda: check.llen(PARKED_QUEUE), timeout=30)
        _started(stack, "worker", "parked-worker", env, "-Q", PARKED_QUEUE)

        record = client.wait("parked", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        [answer] = [r for e in client.events("parked", inv) for r in e.get_function_responses()]
        assert answer.response == {"tag": "lost-once"}
        assert check.hget(jobs, f"a:{answer.id}") == "2"  # sent again once
        assert check.hget(jobs, f"l:{answer.id}") == "1"  # its loss counted once, by two watchdogs
