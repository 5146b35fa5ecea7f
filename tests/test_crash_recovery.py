"""Orchestrators killed (or Redis failing) at exact steps: every invocation ends as its agent decided.

Each test arms a failpoint (``ADK_CELERY_FAILPOINTS``, see orchestrator/failpoints.py) in a
real orchestrator process, waits for that process to die at the named step, starts another
orchestrator, and checks what a user would: the invocation completes, each call is answered
exactly once, each agent gives its final answer once.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from contextlib import ExitStack
from typing import Any

import pytest
import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.apps import ALL_APPS, APP_SPECS
from tests.support.polling import eventually
from tests.support.processes import ManagedProcess, stack_env, start_celery_process

EXPECTED_FINAL = {
    "lookup": "Oslo found by pid",
    "fanout": "both: Oslo, Rome",
    "parallel": "summary of a done, b done, c done",
}


def _stack(
    redis_url: str, db: int, failpoints: str, apps: str = APP_SPECS, **settings: str
) -> tuple[str, dict[str, str], dict[str, str]]:
    url = redis_url.rsplit("/", 1)[0] + f"/{db}"
    redis.Redis.from_url(url).flushdb()
    # A short lease: the orchestrator that takes over claims the dead one's wake-ups and
    # session leases once they are 2 s old.
    env = stack_env(url, apps, lease_retry_seconds="0.2", lease_ttl_seconds="2", **settings)
    return url, env, {**env, "ADK_CELERY_FAILPOINTS": failpoints}


def _redelivering_stack(redis_url: str, failpoints: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """:func:`_stack` whose unacknowledged task messages are delivered again within ~2.5 s."""
    return _stack(
        redis_url, 8, failpoints, visibility_timeout_seconds="2",
        broker_transport_options='{"unacked_restore_interval": 0.5, "unacked_restore_throttle": 1}')


def _orchestrator_worker_client(
    stack: ExitStack, url: str, env: dict[str, str], name: str
) -> tuple[ManagedProcess, Any]:
    """An orchestrator and a worker started with ``env``, and a client; stopped by ``stack``."""
    from workers.client import Client

    orchestrator = start_celery_process("orchestrator", name, env)
    stack.callback(orchestrator.stop)
    worker = start_celery_process("worker", f"{name}-worker", env)
    stack.callback(worker.stop)
    client = Client(Settings(redis_url=url, apps=APP_SPECS, lease_retry_seconds=0.2))
    stack.callback(client.close)
    return orchestrator, client


def _doomed_orchestrator(
    stack: ExitStack, url: str, env: dict[str, str], armed: dict[str, str], apps: str
) -> tuple[ManagedProcess, Any]:
    """An orchestrator started with the failpoints of ``armed``, a worker with ``env`` and a
    client; stopped by ``stack``. The test waits for the orchestrator's death, then starts
    its heir."""
    from workers.client import Client

    doomed = start_celery_process("orchestrator", "doomed", armed)
    stack.callback(doomed.stop)
    worker = start_celery_process("worker", "crash-worker", env)
    stack.callback(worker.stop)
    client = Client(Settings(redis_url=url, apps=apps, lease_retry_seconds=0.2))
    stack.callback(client.close)
    return doomed, client


def _wait_dead(process: ManagedProcess, timeout: float = 30.0) -> None:
    process.proc.wait(timeout)
    assert process.proc.returncode == -9, process.output()  # killed by its failpoint


def _unacked_on(check: redis.Redis, queue: str) -> list[bytes]:
    """The broker's unacknowledged messages taken from ``queue`` (kombu's ``unacked`` hash)."""
    return [tag for tag, raw in check.hgetall("unacked").items() if json.loads(raw)[2] == queue]


def _assert_answered_once(events, app: str) -> None:
    calls = [c.id for e in events for c in e.get_function_calls()]
    responses = Counter(r.id for e in events for r in e.get_function_responses())
    assert calls, "the invocation made no call"
    assert {cid: responses[cid] for cid in calls} == dict.fromkeys(calls, 1)
    texts = [e for e in events
             if e.content and any(p.text for p in e.content.parts or []) and e.author != "user"]
    finals = Counter(e.author for e in texts)
    assert all(count == 1 for count in finals.values()), finals  # no agent answered twice
    assert EXPECTED_FINAL[app] in texts[-1].content.parts[0].text


@pytest.mark.parametrize(("app", "failpoint"), [
    # The worker's answer was committed; the orchestrator died before the model went on.
    ("lookup", "runner.answers_committed=kill"),
    # Answer and final text committed; died before saving the invocation record.
    ("lookup", "orchestrator.resume.before_save=kill"),
    ("fanout", "orchestrator.resume.before_save=kill"),
    ("parallel", "orchestrator.resume.before_save=kill"),
    # The call (or the branch dispatch) was committed; died before its job was published
    # (a call's job is published after its commit when fast publish is off).
    ("lookup", "dispatch.before_publish=kill,plain"),
    ("fanout", "dispatch.before_publish=kill,plain"),
    ("parallel", "dispatch.before_publish=kill"),
    # Fast publish off: the job was journaled, its message not sent yet (the heir's watchdog
    # finds it neither queued nor running, and sends it again).
    ("lookup", "dispatch.journaled_before_send=kill,plain"),
    # The call was committed with its job (one script); died before the flow went on.
    ("lookup", "dispatch.published_with_commit=kill"),
    ("fanout", "dispatch.published_with_commit=kill"),
    # One branch job out of three was published.
    ("parallel", "dispatch.after_one_branch=kill"),
])
def test_an_orchestrator_killed_mid_invocation_is_taken_over_and_answers_once(
    redis_url, app, failpoint
):
    failpoint, plain = failpoint.removesuffix(",plain"), failpoint.endswith(",plain")
    fast_watch = {"job_lost_after_seconds": "1", "watchdog_interval_seconds": "0.2"}
    url, env, armed = _stack(redis_url, 8, failpoint, **(fast_watch if plain else {}))
    if plain:
        armed["ADK_CELERY_FAST_PUBLISH"] = "false"

    with ExitStack() as stack:
        doomed, client = _doomed_orchestrator(stack, url, env, armed, APP_SPECS)

        inv = client.enqueue(app, "u", "find Oslo")
        _wait_dead(doomed)
        heir = start_celery_process("orchestrator", "heir", env)
        stack.callback(heir.stop)

        record = client.wait(app, inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record is not None and record.status is InvocationStatus.COMPLETED, (
            record, heir.output())
        assert record.pending_calls == []
        _assert_answered_once(client.events(app, inv), app)


async def _in_process(app_name: str, message: str) -> list[Any]:
    """The events of one invocation of ``app_name`` run in process, nothing killed."""
    from orchestrator.distributed.embedded import EmbeddedRuntime
    from orchestrator.distributed.registry import AppRegistry

    rt = EmbeddedRuntime(AppRegistry([app for app in ALL_APPS if app.name == app_name]))
    inv = await rt.enqueue(app_name=app_name, user_id="u", new_message=message)
    record = await rt.wait(app_name, inv, timeout=10, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    return await rt.events(app_name, inv)


def _answers_and_after_runs(events: list[Any]) -> tuple[list[str], list[int]]:
    """The agent's texts (the pid a tool ran in left out) and each ``after_runs`` written."""
    texts = [re.sub(r"pid \d+", "pid N", e.content.parts[0].text) for e in events
             if e.author != "user" and e.content and e.content.parts and e.content.parts[0].text]
    return texts, [e.actions.state_delta["after_runs"] for e in events
                   if "after_runs" in e.actions.state_delta]


@pytest.mark.parametrize(("app", "failpoint"), [
    # No tool: the start commits the reply, then the after_agent callback's state, and dies.
    ("chat_after", "orchestrator.start.before_save=kill"),
    # A remote long-running tool: after_agent runs at the pause (as in google-adk) and at the
    # end of the resume, which commits the answer, the final text and the callback's state,
    # and dies.
    ("lookup_after", "orchestrator.resume.before_save=kill"),
])
def test_an_orchestrator_killed_after_the_after_agent_callback_answers_once(
    redis_url, app, failpoint
):
    """Not resumable. The heir recovers the invocation from its log: it must not call the
    model again (a second answer) nor run after_agent again (its effect twice)."""
    url, env, armed = _stack(redis_url, 8, failpoint)
    with ExitStack() as stack:
        doomed, client = _doomed_orchestrator(stack, url, env, armed, APP_SPECS)
        inv = client.enqueue(app, "u", "find Oslo")
        _wait_dead(doomed)
        heir = start_celery_process("orchestrator", "heir", env)
        stack.callback(heir.stop)
        record = client.wait(app, inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record, heir.output())
        recovered = _answers_and_after_runs(client.events(app, inv))
    in_process = _answers_and_after_runs(asyncio.run(_in_process(app, "find Oslo")))
    assert recovered == in_process
    assert len(in_process[0]) == 1


@pytest.mark.parametrize("failpoint", [
    "orchestrator.before_run=error*1",  # Redis drops the connection as a resume starts
    "runner.answers_committed=error*1",  # ... right after the answer was committed
])
def test_a_transient_redis_error_in_the_orchestrator_is_retried_not_failed(redis_url, failpoint):
    url, _, armed = _stack(redis_url, 9, failpoint)
    with ExitStack() as stack:
        orchestrator, client = _orchestrator_worker_client(stack, url, armed, "flaky")

        inv = client.enqueue("lookup", "u", "find Oslo")
        record = client.wait("lookup", inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record is not None and record.status is InvocationStatus.COMPLETED, (
            record, orchestrator.output())
        assert any("Failpoint" in line for line in orchestrator.lines)  # it did fail once
        _assert_answered_once(client.events("lookup", inv), "lookup")


@pytest.mark.parametrize("failpoint", [
    "api.transaction.before_send=kill",  # nothing of the batch written
    "api.transaction.sent=kill",  # the batch written, no request answered
])
def test_an_api_killed_with_a_batch_of_enqueues_loses_none_and_runs_none_twice(
    redis_url, failpoint
):
    """Requests in flight when ``adk-celery api`` dies get no answer; sent again with their
    invocation ids to another api process, each invocation runs, once."""
    import httpx

    from orchestrator import platform
    from tests.test_api import start_api

    url, env, armed = _stack(redis_url, 10, failpoint)
    with ExitStack() as stack:
        orchestrator, client = _orchestrator_worker_client(stack, url, env, "api-crash")
        doomed, base = start_api(armed)
        stack.callback(doomed.stop)
        sessions = [client.create_session("lookup", "u").id for _ in range(3)]
        ids = [platform.new_invocation_id() for _ in sessions]

        async def enqueue_all(at: str) -> list[int | str]:
            async with httpx.AsyncClient(base_url=at, timeout=20) as http:
                replies = await asyncio.gather(*(
                    http.post(f"/apps/lookup/users/u/sessions/{session}/invocations",
                              json={"newMessage": "find Oslo", "invocationId": inv})
                    for session, inv in zip(sessions, ids, strict=True)
                ), return_exceptions=True)
            return [r.status_code if isinstance(r, httpx.Response) else type(r).__name__
                    for r in replies]

        lost = asyncio.run(enqueue_all(base))
        assert not any(code == 202 for code in lost), lost  # nobody was told "accepted"
        _wait_dead(doomed)
        heir, heir_base = start_api(env)
        stack.callback(heir.stop)
        assert asyncio.run(enqueue_all(heir_base)) == [202, 202, 202]  # sent again: accepted

        for inv in ids:
            record = client.wait("lookup", inv, timeout=40, until=InvocationStatus.FINISHED)
            assert record.status is InvocationStatus.COMPLETED, (record, orchestrator.output())
            _assert_answered_once(client.events("lookup", inv), "lookup")
            user_messages = [e for e in client.events("lookup", inv) if e.author == "user"]
            assert len(user_messages) == 1  # one run per invocation, not one per request


@pytest.mark.parametrize(("app", "failpoint", "gate_answer"), [
    # The call was committed; died before the confirmation gate decided on it (the log
    # cannot tell that from a call the gate let through): the heir asks again.
    ("safe", "flow.calls_committed=kill", True),
    # The gate's step half done. Its request came first (the call alone in its turn); died
    # before its answer: the call is held all the same, not asked about again (its
    # provisional answer is not made again: the call's one answer is its real one).
    ("safe", "flow.confirmation_half_committed=kill", False),
    # Its answer came first (beside a plain call's); died before the request: the heir asks.
    ("guarded_mixed", "flow.confirmation_half_committed=kill", True),
    # The approval was committed; died before the confirmed call's job went out.
    ("safe", "runner.answers_committed=kill", True),
    ("guarded", "runner.answers_committed=kill", True),
    ("safe", "dispatch.before_publish=kill", True),
    # The confirmed call's job went out; died before the invocation's record was saved.
    ("safe", "dispatch.after_publish=kill", True),
])
def test_an_orchestrator_killed_around_a_confirmation_runs_the_confirmed_tool_once(
    redis_url, app, failpoint, gate_answer
):
    """A remote tool that needs a confirmation runs only confirmed, once, and its call gets
    one real answer (after the gate's), whichever step the orchestrator died at."""
    from tests.apps_confirm import CONFIRM_APP_SPECS, noted_runs
    from tests.test_invocation_contract import GUARDED, REQUIRES_CONFIRMATION

    tool, _, result, prefix = {**GUARDED, "guarded_mixed": GUARDED["guarded"][:3] + ("mixed",)}[app]
    url, env, armed = _stack(redis_url, 8, failpoint, apps=CONFIRM_APP_SPECS)

    with ExitStack() as stack:
        doomed, client = _doomed_orchestrator(stack, url, env, armed, CONFIRM_APP_SPECS)

        def take_over() -> None:
            _wait_dead(doomed)
            heir = start_celery_process("orchestrator", "heir", env)
            stack.callback(heir.stop)

        inv = client.enqueue(app, "u", "pay")
        if failpoint.startswith("flow."):
            take_over()
        record = client.wait(app, inv, timeout=40)
        assert record is not None and record.status is InvocationStatus.PAUSED, record
        [request_id] = record.pending_calls
        assert record.pending_tools == {request_id: "adk_request_confirmation"}
        assert noted_runs(inv, url) == []  # not before its confirmation
        client.answer(app, inv, request_id, {"confirmed": True})
        if not failpoint.startswith("flow."):
            take_over()

        record = client.wait(app, inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record is not None and record.status is InvocationStatus.COMPLETED, record
        events = client.events(app, inv)
        [call_id] = [c.id for e in events for c in e.get_function_calls() if c.name == tool]
        answers = [r.response for e in events for r in e.get_function_responses()
                   if r.id == call_id]
        assert answers == ([REQUIRES_CONFIRMATION, result] if gate_answer else [result])
        requests = [c for e in events for c in e.get_function_calls()
                    if c.name == "adk_request_confirmation"]
        assert len(requests) == 1  # asked once, answered once
        texts = [e.content.parts[0].text for e in events
                 if e.author == "agent" and e.content and e.content.parts[0].text]
        assert texts == [f"{prefix}: {result}"]
        assert [what for what, _ in noted_runs(inv, url)] == ["confirmed"]


def _cancel_task(client: Any, app: str, invocation_id: str) -> None:
    """Cancel as a service that only has Celery does: the ``adk_celery.cancel`` task, which
    an orchestrator runs (``Client.cancel`` writes the cancel itself)."""
    from workers import wire_json
    from workers.celery_app import TASK_CANCEL

    client._celery.send_task(TASK_CANCEL, kwargs={"app_name": app, "invocation_id": invocation_id},
                             queue=client._settings.invocations_queue, serializer=wire_json.NAME)


@pytest.mark.parametrize("failpoint", [
    # Killed after committing the cancel's error answer, before saving "cancelled": the heir
    # ends it cancelled, and the call keeps its one answer.
    "cancel.sealed=kill",
    # Killed after queuing the cancel's work item, before setting the cancel flag: the heir
    # takes the item and ends the paused invocation cancelled (a flag set without its item
    # had left it paused for ever, though the cancel was accepted).
    "cancel.queued=kill",
])
def test_an_orchestrator_killed_as_it_cancels_is_taken_over(redis_url, failpoint):
    url, env, armed = _stack(redis_url, 8, failpoint)
    with ExitStack() as stack:
        doomed, client = _doomed_orchestrator(stack, url, env, armed, APP_SPECS)
        inv = client.enqueue("approval", "u", "pay")
        assert client.wait("approval", inv, timeout=20).status is InvocationStatus.PAUSED
        _cancel_task(client, "approval", inv)
        _wait_dead(doomed)
        heir = start_celery_process("orchestrator", "heir", env)
        stack.callback(heir.stop)

        record = client.wait("approval", inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.CANCELLED, (record, heir.output())
        answers = [r.response for e in client.events("approval", inv)
                   for r in e.get_function_responses()]
        assert answers == [{"error": "Invocation was cancelled."}]


def test_a_cancel_cut_before_its_flag_still_keeps_the_invocations_queued_job_from_running(redis_url):
    # The orchestrator running the cancel died after queuing the item, before setting the
    # flag: the heir ended the invocation cancelled from the item, but workers read only the
    # flag, so the call's job, still queued, ran its tool after the cancel.
    from tests.apps import PARKED_QUEUE

    url, env, armed = _stack(redis_url, 8, "cancel.queued=kill")
    with ExitStack() as stack:
        doomed, client = _doomed_orchestrator(stack, url, env, armed, APP_SPECS)
        inv = client.enqueue("parked_plain", "u", "after-cancel")
        assert client.wait("parked_plain", inv, timeout=20).status is InvocationStatus.PAUSED
        _cancel_task(client, "parked_plain", inv)
        _wait_dead(doomed)
        heir = start_celery_process("orchestrator", "heir", env)
        stack.callback(heir.stop)
        record = client.wait("parked_plain", inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.CANCELLED, (record, heir.output())

        # Only now a worker for the job's queue: it takes the job and must skip it.
        check = redis.Redis.from_url(url)
        stack.callback(check.close)
        late = start_celery_process("worker", "late-worker", env, "-Q", PARKED_QUEUE)
        stack.callback(late.stop)
        eventually("the job taken and done with", lambda: not check.llen(PARKED_QUEUE)
                   and not _unacked_on(check, PARKED_QUEUE), timeout=30)
        assert not check.exists("test:parked:after-cancel"), late.output()  # the tool never ran


def test_a_cancel_whose_first_write_meets_redis_away_is_done_not_dropped(redis_url):
    # The cancel task failed on the outage and Celery acknowledged its message (a failed
    # task's message is): the cancel was gone, the invocation paused for ever, though
    # `adk-celery cancel` had said "cancel requested". It waits the outage out now.
    url, env, armed = _stack(redis_url, 8, "queue.push=error*1")
    with ExitStack() as stack:
        _, client = _doomed_orchestrator(stack, url, env, armed, APP_SPECS)
        inv = client.enqueue("approval", "u", "pay")
        assert client.wait("approval", inv, timeout=20).status is InvocationStatus.PAUSED
        client.cancel("approval", inv)

        record = client.wait("approval", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.CANCELLED, record


def test_an_invoke_message_delivered_again_is_the_same_invocation(redis_url):
    # An invoke message without an invocation id, its orchestrator killed after queuing the
    # invocation and before acknowledging the message: Celery delivers it again, and it used
    # to get fresh ids, one message running twice in two sessions.
    from workers.celery_app import TASK_INVOKE, create_celery_app

    url, env, armed = _redelivering_stack(redis_url, "invoke.queued=kill")
    with ExitStack() as stack:
        doomed, client = _doomed_orchestrator(stack, url, env, armed, APP_SPECS)
        sender = create_celery_app(Settings(redis_url=url, apps=APP_SPECS))
        stack.callback(sender.close)
        sent = sender.send_task(TASK_INVOKE, queue="adk.invocations", kwargs={
            "app_name": "chat", "user_id": "solo", "new_message": "hello once"})
        _wait_dead(doomed)
        heir = start_celery_process("orchestrator", "heir", env)
        stack.callback(heir.stop)

        ids = sent.get(timeout=60)  # the second delivery's answer (the first died)
        record = client.wait("chat", ids["invocation_id"], timeout=30,
                             until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record
        sessions = client.list_sessions("chat", "solo")
        assert [s.id for s in sessions] == [ids["session_id"]]
        assert [r.invocation_id for r in client.invocations(
            "chat", user_id="solo", session_id=ids["session_id"]).records] == [ids["invocation_id"]]


def test_an_answer_message_delivered_again_is_taken_once(redis_url):
    # An answer sent as a Celery task, its orchestrator killed after storing it and before
    # acknowledging the message: Celery delivers it again to another orchestrator. The
    # second delivery must report the answer taken (the sender waits for that), and the
    # call must be answered once.
    from workers.celery_app import TASK_ANSWER, create_celery_app

    url, env, armed = _redelivering_stack(redis_url, "answer.stored=kill")
    with ExitStack() as stack:
        doomed, client = _doomed_orchestrator(stack, url, env, armed, APP_SPECS)
        inv = client.enqueue("approval", "u", "pay")
        assert client.wait("approval", inv, timeout=20).status is InvocationStatus.PAUSED
        [call] = client.status("approval", inv).pending_calls
        sender = create_celery_app(Settings(redis_url=url, apps=APP_SPECS))
        stack.callback(sender.close)
        sent = sender.send_task(TASK_ANSWER, queue="adk.invocations", kwargs={
            "app_name": "approval", "invocation_id": inv, "function_call_id": call,
            "response": {"approved": True}})
        _wait_dead(doomed)
        heir = start_celery_process("orchestrator", "heir", env)
        stack.callback(heir.stop)

        assert sent.get(timeout=60) == {"invocation_id": inv, "answered": call}
        record = client.wait("approval", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record
        events = client.events("approval", inv)
        assert [(r.id, r.response) for e in events for r in e.get_function_responses()] == [
            (call, {"approved": True})]
