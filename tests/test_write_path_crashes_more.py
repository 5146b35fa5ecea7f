"""More processes killed at write steps: each invocation still ends once, as its agent decided.

The crash points a second audit of the write paths found without a kill test (each step's
failpoint is in the code next to the write):

- an orchestrator killed once it saved an item's record and, in the same script, claimed
  the session's next item (``orchestrator.next_claimed``): the next holder of the session
  must run the claimed item, once, in order (a message held aside while the first one
  waited for its worker included);
- an orchestrator whose watchdog sent a lost job again and died right after
  (``watchdog.sent_again``): the heir's watchdog must find the new attempt queued and wait
  for a worker, not send a third;
- a watchdog killed between marking a running call past its deadline (``t:``) and answering
  it with the timeout (``watchdog.timeout_marked``): the heir's must answer it once, send no
  job again, drop the tool's late answer and end its watch on the attempt;
- an orchestrator that found the invocation it was running cancelled, sealed its open calls
  and died before saving the record (``orchestrator.run_cancel_sealed``): the heir must end
  it cancelled, each call with its one seal, its queued job never run;
- an orchestrator recovering an invocation whose record lags its log, killed right after it
  sent an open call's job again (``recovery.redispatched``): the next one's recovery must
  not send it a second time, and the tool must run once (a ParallelAgent's branch job too);
- an ``adk-celery api`` killed once an answer it was sent is stored with its resume, before
  its reply (``api.answer.stored``): the answer sent again to another api process must be
  taken once (202, not 409), before or after the resume ran, and the call answered once.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import pytest
import redis

from config import Settings
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.jobs import watch_member
from orchestrator.distributed.models import InvocationStatus
from tests.apps import APP_SPECS, PARKED_QUEUE
from tests.apps_extra import gate_key, runs_key
from tests.support.polling import eventually
from tests.support.processes import stack_env
from tests.test_crash_recovery import _assert_answered_once, _stack, _unacked_on
from tests.test_write_path_crashes import (
    FAST_WATCH,
    SPECS,
    _client,
    _db,
    _killed,
    _started,
    lost_job_under_a_doomed_watchdog,
)


def _texts(events: list[Any]) -> list[tuple[str, str]]:
    """(author, text) of each event with text, in the session's order."""
    return [(e.author, e.content.parts[0].text) for e in events
            if e.content and e.content.parts and e.content.parts[0].text]


def _responses(events: list[Any]) -> list[tuple[str, Any]]:
    """(call id, response) of each FunctionResponse, in order."""
    return [(r.id, r.response) for e in events for r in e.get_function_responses()]


def test_an_orchestrator_killed_after_saving_and_claiming_the_next_message_runs_it_once(
    redis_url
):
    # Two messages queued on one session before any orchestrator runs: the first one's
    # record is saved "completed" and the second's start claimed, in one script; then the
    # kill. The heir takes the claimed item back (a takeover) and runs it, once.
    url, env, armed = _stack(redis_url, 11, "orchestrator.next_claimed=kill")
    with ExitStack() as stack:
        client = _client(stack, url, APP_SPECS)
        session = client.create_session("chat", "u").id
        first = client.enqueue("chat", "u", "one", session_id=session)
        second = client.enqueue("chat", "u", "two", session_id=session)
        doomed = _started(stack, "orchestrator", "doomed", armed)
        _killed(doomed)
        assert client.status("chat", first).status is InvocationStatus.COMPLETED
        assert client.status("chat", second).status is InvocationStatus.QUEUED
        heir = _started(stack, "orchestrator", "heir", env)

        record = client.wait("chat", second, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record, heir.output())
        assert client.status("chat", first).status is InvocationStatus.COMPLETED
        assert _texts(client.events("chat", first)) == [("user", "one"), ("agent", "reply to one")]
        assert _texts(client.events("chat", second)) == [("user", "two"), ("agent", "reply to two")]
        with redis.Redis.from_url(url) as check:  # nothing else in the session
            assert check.llen(keys.session_events("chat", "u", session)) == 4


def test_an_orchestrator_killed_after_claiming_a_message_held_behind_a_worker_call(redis_url):
    # The first message's plain tool runs on a worker: the second message is held aside
    # while the first waits for it. The worker's answer completes the first; the same
    # script puts the held message back and claims it; then the kill.
    url, env, armed = _stack(redis_url, 11, "orchestrator.next_claimed=kill")
    check = _db(url, 11)[1]
    with ExitStack() as stack:
        stack.callback(check.close)
        client = _client(stack, url, APP_SPECS)
        doomed = _started(stack, "orchestrator", "doomed", armed)
        session = client.create_session("parked_plain", "u").id
        first = client.enqueue("parked_plain", "u", "one", session_id=session)
        assert client.wait("parked_plain", first, timeout=20).status is InvocationStatus.PAUSED
        second = client.enqueue("parked_plain", "u", "two", session_id=session)
        held = keys.session_held("parked_plain", "u", session)
        eventually("the second message held", lambda: check.llen(held), timeout=20)
        # Only now a worker for the first one's job: its answer completes it.
        _started(stack, "worker", "parked-worker", env, "-Q", PARKED_QUEUE)
        _killed(doomed)  # the first completed, the second claimed
        assert client.status("parked_plain", first).status is InvocationStatus.COMPLETED
        assert client.status("parked_plain", second).status is InvocationStatus.QUEUED
        assert not check.llen(held)
        heir = _started(stack, "orchestrator", "heir", env)

        record = client.wait("parked_plain", second, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record, heir.output())
        events = client.events("parked_plain", first)
        [(call_id, response)] = _responses(events)
        assert response == {"tag": "one"}
        jobs = keys.invocation_jobs("parked_plain", first)
        assert check.hget(jobs, f"a:{call_id}") == "1"  # its job sent once
        assert _texts(events) == [("user", "one"), ("agent", "ran one")]
        # The model reads the first answer in the history: the second makes no call.
        events = client.events("parked_plain", second)
        assert _texts(events) == [("user", "two"), ("agent", "ran one")]
        assert _responses(events) == []
        assert check.llen(keys.session_events("parked_plain", "u", session)) == 6


def test_a_watchdog_killed_right_after_sending_a_lost_job_again(redis_url):
    # Attempt 2 is journaled and in its queue when the watchdog dies: the heir's watchdog
    # finds it queued and waits for a worker; it does not send attempt 3.
    url, check = _db(redis_url, 12)
    env = stack_env(url, SPECS, **FAST_WATCH)
    with ExitStack() as stack:
        stack.callback(check.close)
        client, inv = lost_job_under_a_doomed_watchdog(
            stack, url, check, env, "watchdog.sent_again")  # it sent the job again
        [call] = client.calls("parked", inv)
        jobs = keys.invocation_jobs("parked", inv)
        assert (call.attempt, check.hget(jobs, f"l:{call.function_call_id}")) == (2, "1")
        assert check.llen(PARKED_QUEUE) == 1  # attempt 2, waiting for a worker
        heir = _started(stack, "orchestrator", "heir", env)
        _started(stack, "worker", "parked-worker", env, "-Q", PARKED_QUEUE)

        record = client.wait("parked", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, heir.output())
        assert _responses(client.events("parked", inv)) == [
            (call.function_call_id, {"tag": "lost-once"})]
        assert check.hget(jobs, f"a:{call.function_call_id}") == "2"  # no third attempt
        assert check.hget(jobs, f"l:{call.function_call_id}") == "1"  # its loss counted once
        assert check.exists("test:parked:lost-once")


def test_a_watchdog_killed_between_marking_a_timeout_and_answering_it(redis_url):
    # The tool (deadline 1 s) runs on, its worker alive: the watchdog marks the running
    # attempt (``t:``), to watch it after the answer, and dies before answering. The heir's
    # watchdog answers the call with the timeout, once, and sends no job again; the tool's
    # late answer is dropped, and the watch on the attempt ends with it.
    url, check = _db(redis_url, 12)
    env = stack_env(url, SPECS, **FAST_WATCH, tool_timeout_seconds="1")
    with ExitStack() as stack:
        stack.callback(check.close)
        doomed = _started(stack, "orchestrator", "doomed",
                          {**env, "ADK_CELERY_FAILPOINTS": "watchdog.timeout_marked=kill"})
        worker = _started(stack, "worker", "worker", env)
        client = _client(stack, url)

        inv = client.enqueue("fragile", "u", "go")
        _killed(doomed)
        [call] = client.calls("fragile", inv)
        jobs = keys.invocation_jobs("fragile", inv)
        assert check.hget(jobs, f"t:{call.function_call_id}") == "1"
        assert client.status("fragile", inv).status is InvocationStatus.PAUSED  # not answered
        heir = _started(stack, "orchestrator", "heir", env)

        record = client.wait("fragile", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, heir.output())
        timed_out = {"error": "Tool 'fragile_step' timed out: no answer within 1 s."}
        assert _responses(client.events("fragile", inv)) == [(call.function_call_id, timed_out)]
        check.lpush(gate_key(inv), "late")  # the tool returns now: too late
        worker.wait_for_line(lambda line: "fragile_step" in line and "succeeded" in line)
        watch = keys.job_watch(Settings(redis_url=url).invocations_queue)
        member = watch_member("fragile", inv, call.function_call_id)
        eventually("the watch on the attempt ended",
                   lambda: check.zscore(watch, member) is None, timeout=30)
        assert not check.hexists(jobs, f"t:{call.function_call_id}")
        assert _responses(client.events("fragile", inv)) == [(call.function_call_id, timed_out)]
        assert check.hget(jobs, f"a:{call.function_call_id}") == "1"  # never sent again
        assert check.lrange(runs_key(inv) + ":attempts", 0, -1) == ["1"]  # the tool ran once


def test_an_orchestrator_killed_after_sealing_the_calls_of_a_run_it_found_cancelled(redis_url):
    # One turn calls a remote tool (its job waits in the "parked" queue) and an in-process
    # tool; the cancel is taken while the orchestrator runs the latter, whose answer is then
    # refused: the run seals the open remote call, and dies before saving the record. The
    # heir ends the invocation cancelled, the call keeps its one answer (the seal), and the
    # queued job is skipped, never run.
    from tests.apps_cancel import PARKED_AND_HELD_SPEC, started_key
    from tests.apps_cancel import gate_key as held_gate

    apps = f"{APP_SPECS},{PARKED_AND_HELD_SPEC}"
    url, env, armed = _stack(redis_url, 13, "orchestrator.run_cancel_sealed=kill", apps=apps)
    check = _db(url, 13)[1]
    with ExitStack() as stack:
        stack.callback(check.close)
        client = _client(stack, url, apps)
        doomed = _started(stack, "orchestrator", "doomed", armed)
        app = "parked_and_held"
        inv = client.enqueue(app, "u", "go s1")
        assert check.blpop([started_key("s1")], timeout=30)[1] == "tool"  # held_step runs
        client.cancel(app, inv)
        eventually("the cancel taken (its flag set)", lambda: check.exists(
            keys.cancel_flag(app, inv)), timeout=30)
        check.lpush(held_gate("s1"), "go on")  # its answer comes after the cancel
        _killed(doomed)
        assert client.status(app, inv).status is InvocationStatus.RUNNING  # not saved
        events = client.events(app, inv)
        [parked_call] = [c.id for e in events for c in e.get_function_calls()
                         if c.name == "parked_tool"]
        cancelled = {"error": "Invocation was cancelled."}
        assert _responses(events) == [(parked_call, cancelled)]  # sealed before the kill
        heir = _started(stack, "orchestrator", "heir", env)

        record = client.wait(app, inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.CANCELLED, (record, heir.output())
        assert record.pending_calls == []
        events = client.events(app, inv)
        assert _responses(events) == [(parked_call, cancelled)]  # sealed once
        assert [e.author for e in events] == ["user", "agent", "agent"]  # nothing after it
        # Only now a worker for the job's queue: it takes the job and skips it.
        late = _started(stack, "worker", "late-worker", env, "-Q", PARKED_QUEUE)
        eventually("the job taken and done with", lambda: not check.llen(PARKED_QUEUE)
                   and not _unacked_on(check, PARKED_QUEUE), timeout=30)
        assert not check.exists("test:parked:s1"), late.output()  # the tool never ran


def test_an_orchestrator_killed_after_sending_an_open_calls_job_again_in_recovery(redis_url):
    # The first orchestrator committed the call and died before its job went out (fast
    # publish off); the second, recovering the invocation from its log, sent the job and
    # died before going on. The third recovers it again: the job is not sent twice (one
    # message, one attempt), the tool runs once, and the call gets its one answer.
    watch = {k: v for k, v in FAST_WATCH.items() if k != "lease_retry_seconds"}
    url, env, first_armed = _stack(redis_url, 14, "dispatch.before_publish=kill", apps=SPECS,
                                   **watch)
    first_armed["ADK_CELERY_FAST_PUBLISH"] = "false"
    check = _db(url, 14)[1]
    with ExitStack() as stack:
        stack.callback(check.close)
        client = _client(stack, url)
        first = _started(stack, "orchestrator", "first", first_armed)
        inv = client.enqueue("fragile", "u", "go")
        _killed(first)
        jobs = keys.invocation_jobs("fragile", inv)
        assert not check.hgetall(jobs) and not check.llen("adk.tools")  # no job out
        second = _started(stack, "orchestrator", "second",
                          {**env, "ADK_CELERY_FAILPOINTS": "recovery.redispatched=kill"})
        _killed(second)
        [call_id] = [c.id for e in client.events("fragile", inv) for c in e.get_function_calls()]
        assert check.hget(jobs, f"a:{call_id}") == "1"
        assert check.llen("adk.tools") == 1  # sent by the recovery
        assert client.status("fragile", inv).status is InvocationStatus.RUNNING  # not saved
        heir = _started(stack, "orchestrator", "heir", env)
        _started(stack, "worker", "worker", env)
        started = check.blpop([runs_key(inv)], timeout=30)
        assert started is not None, heir.output()
        check.lpush(gate_key(inv), "test")

        record = client.wait("fragile", inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record, heir.output())
        events = client.events("fragile", inv)
        [(answered, response)] = _responses(events)
        assert (answered, response["released"]) == (call_id, True)
        assert [c.id for e in events for c in e.get_function_calls()] == [call_id]
        assert check.hget(jobs, f"a:{call_id}") == "1"  # sent once, by the recovery
        assert check.lrange(runs_key(inv) + ":attempts", 0, -1) == ["1"]  # the tool ran once
        assert not check.llen(runs_key(inv))
        assert _texts(events)[-1] == ("agent", f"done on {response['pid']} released=True")


@pytest.mark.parametrize("resumed_before_retry", [False, True])
def test_an_api_killed_after_storing_an_answer_before_replying(redis_url, resumed_before_retry):
    # The caller gets no reply and sends the answer again to another api process: taken
    # once (202, never a 409 for an answer that was taken), whether the invocation's resume
    # ran since or not; the call has one answer and the agent answers once.
    import httpx

    from tests.test_api import start_api

    url, env, armed = _stack(redis_url, 15, "api.answer.stored=kill")
    with ExitStack() as stack:
        client = _client(stack, url, APP_SPECS)
        orchestrator = _started(stack, "orchestrator", "orch", env)
        inv = client.enqueue("approval", "u", "pay")
        record = client.wait("approval", inv, timeout=20)
        assert record.status is InvocationStatus.PAUSED
        [call_id] = record.pending_calls
        if not resumed_before_retry:
            orchestrator.stop()  # the answer's resume waits for the next orchestrator
        doomed, base = start_api(armed)
        stack.callback(doomed.stop)
        path = f"/apps/approval/invocations/{inv}/answer"
        body = {"functionCallId": call_id, "response": {"approved": True}}
        with pytest.raises(httpx.TransportError):
            httpx.post(base + path, json=body, timeout=30)  # no reply: the api died
        _killed(doomed)
        if resumed_before_retry:
            assert client.wait("approval", inv, timeout=30, until=InvocationStatus.FINISHED
                               ).status is InvocationStatus.COMPLETED
        else:
            assert client.status("approval", inv).status is InvocationStatus.PAUSED
        heir, heir_base = start_api(env)
        stack.callback(heir.stop)

        again = httpx.post(heir_base + path, json=body, timeout=30)
        assert (again.status_code, again.json()) == (
            202, {"invocationId": inv, "answered": call_id})
        if not resumed_before_retry:
            _started(stack, "orchestrator", "heir-orch", env)
        record = client.wait("approval", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record
        events = client.events("approval", inv)
        assert _responses(events) == [(call_id, {"approved": True})]
        assert _texts(events) == [("user", "pay"), ("agent", "approval: {'approved': True}")]


def test_an_orchestrator_killed_after_sending_a_branch_job_again_in_recovery(redis_url):
    # The same with ParallelAgent branches run on workers: the first orchestrator published
    # one branch job of three and died; the second's recovery sent a branch job and died.
    # The third gets each branch in once, each branch job sent once.
    from orchestrator.flows.contents import RUN_BRANCH

    url, env, first_armed = _stack(redis_url, 14, "dispatch.after_one_branch=kill")
    check = _db(url, 14)[1]
    with ExitStack() as stack:
        stack.callback(check.close)
        client = _client(stack, url, APP_SPECS)
        first = _started(stack, "orchestrator", "first", first_armed)
        inv = client.enqueue("parallel", "u", "find Oslo")
        _killed(first)
        jobs = keys.invocation_jobs("parallel", inv)
        assert len([f for f in check.hkeys(jobs) if f.startswith("a:")]) == 1  # one of three
        second = _started(stack, "orchestrator", "second",
                          {**env, "ADK_CELERY_FAILPOINTS": "recovery.redispatched=kill"})
        _killed(second)
        heir = _started(stack, "orchestrator", "heir", env)
        _started(stack, "worker", "worker", env)

        record = client.wait("parallel", inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record, heir.output())
        events = client.events("parallel", inv)
        _assert_answered_once(events, "parallel")
        branch_calls = [c.id for e in events for c in e.get_function_calls()
                        if c.name == RUN_BRANCH]
        assert len(branch_calls) == 3
        assert {cid: check.hget(jobs, f"a:{cid}") for cid in branch_calls} == dict.fromkeys(
            branch_calls, "1")  # each branch job sent once
