"""ParallelAgent branches run as jobs (asyncio tasks in process, Celery tasks on workers)."""

from __future__ import annotations

import re

import pytest
from google.genai import types

from orchestrator import InMemoryRunner
from orchestrator.distributed.models import InvocationStatus
from orchestrator.flows.contents import RUN_BRANCH
from tests.apps import parallel_app
from tests.support.backends import CeleryBackend
from tests.support.events import simplify_all, user_text

PID = re.compile(r" pid \d+")


def by_branch(events):
    """Per branch, the (author, payload) sequence without process ids or state-only events."""
    out: dict[str, list] = {}
    for event in events:
        if not event.branch or not event.content:
            continue
        author, payload = simplify_all([event])[0]
        if isinstance(payload, str):
            payload = PID.sub("", payload)
        out.setdefault(event.branch, []).append((author, payload))
    return out


async def in_process_reference():
    runner = InMemoryRunner(app=parallel_app)
    session = await runner.session_service.create_session(app_name="parallel", user_id="u")
    return [e async for e in runner.run_async(user_id="u", session_id=session.id, new_message=user_text("go"))]


async def test_branches_run_as_jobs_and_match_the_in_process_run(backend, request):
    inv = await backend.enqueue("parallel", "u", "go")
    record = await backend.wait("parallel", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("parallel", inv)

    dispatch = next(e for e in events if e.get_function_calls())
    assert dispatch.author == "fan" and {c.name for c in dispatch.get_function_calls()} == {RUN_BRANCH}
    assert dispatch.long_running_tool_ids == {c.id for c in dispatch.get_function_calls()}
    answers = [r for e in events for r in e.get_function_responses() if r.name == RUN_BRANCH]
    assert sorted(r.id for r in answers) == sorted(dispatch.long_running_tool_ids)

    reference = await in_process_reference()
    assert by_branch(events) == by_branch(reference)
    assert set(by_branch(events)) == {"fan.a", "fan.b", "fan.c"}
    # Each branch saw only the history before the fan-out (the user message).
    assert all(p[1].endswith("saw 1") for seq in by_branch(events).values() for p in seq)
    final = [e for e in events if e.author == "after"]
    assert simplify_all(final)[0] == ("after", "summary of a done, b done, c done")
    assert events[-1].author == "pipeline" and events[-1].actions.end_of_agent

    if isinstance(backend, CeleryBackend):
        stack = backend.stack
        texts = [p.text for e in events if e.branch and e.content for p in e.content.parts if p.text]
        pids = {int(m) for text in texts for m in re.findall(r"pid (\d+)", text)}
        assert pids and stack["orchestrator"].pid not in pids
        assert pids <= {stack["worker"].pid}


async def _until_committed(backend, app, inv, predicate, timeout=20.0):
    """The invocation's events once ``predicate`` holds for one of them (bounded poll)."""
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while True:
        events = await backend.events(app, inv)
        if any(predicate(e) for e in events):
            return events
        assert time.monotonic() < deadline, f"not committed in {timeout}s: {simplify_all(events)}"
        await asyncio.sleep(0.02)


async def _until_pending(backend, app, inv, call_id, timeout=20.0):
    """The record once ``call_id`` is among its pending calls (bounded poll)."""
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while True:
        record = await backend.wait(app, inv)
        if record.status is InvocationStatus.PAUSED and call_id in record.pending_calls:
            return record
        assert time.monotonic() < deadline, f"{call_id} never pending: {record}"
        await asyncio.sleep(0.02)


async def test_a_branch_that_pauses_is_answered_and_resumed_later(backend):
    inv = await backend.enqueue("branch_pause", "u", "go")
    # Paused first while both branches are out; x's question arrives with its branch.
    events = await _until_committed(
        backend, "branch_pause", inv, lambda e: e.author == "x" and bool(e.get_function_calls()))
    record = await backend.wait("branch_pause", inv)
    assert record.status is InvocationStatus.PAUSED, record.error
    ask = next(e for e in events if e.author == "x" and e.get_function_calls())
    assert ask.branch == "fan.x"
    [inner] = [c.id for c in ask.get_function_calls()]
    events = await _until_committed(backend, "branch_pause", inv, lambda e: e.author == "y")
    record = await _until_pending(backend, "branch_pause", inv, inner)
    assert not any(e.author == "after" for e in events)

    await backend.answer("branch_pause", inv, inner, {"answer": "yes"})
    record = await backend.wait("branch_pause", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("branch_pause", inv)
    assert ("x", "x heard {'answer': 'yes'}") in simplify_all(events)
    assert simplify_all([e for e in events if e.author == "after" and e.content])[0][1].startswith("summary of")
    assert record.pending_calls == []

async def test_a_branchs_own_call_is_not_answered_from_outside(backend):
    # Only a call left to the outside (a long-running tool's, a confirmation) takes an answer
    # from a client: a branch's call is answered by its branch, whatever a client sends.
    from orchestrator.errors import AnswerRejectedError

    inv = await backend.enqueue("branch_pause", "u", "go")
    events = await _until_committed(
        backend, "branch_pause", inv, lambda e: e.author == "x" and bool(e.get_function_calls()))
    [inner] = [c.id for e in events if e.author == "x" for c in e.get_function_calls()]
    record = await _until_pending(backend, "branch_pause", inv, inner)
    branch_calls = [c for e in events for c in e.get_function_calls() if c.name == RUN_BRANCH]
    forged = next(c.id for c in branch_calls if c.id in record.pending_calls)
    with pytest.raises(AnswerRejectedError, match="answered by its branch"):
        await backend.answer("branch_pause", inv, forged, {"status": "completed"})

    await backend.answer("branch_pause", inv, inner, {"answer": "yes"})
    record = await backend.wait("branch_pause", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("branch_pause", inv)
    assert ("x", "x heard {'answer': 'yes'}") in simplify_all(events)  # x ran to its end


async def _asked(backend, app: str, inv: str):
    """The record once a branch's confirmation is asked (the pause of a branch's job comes
    before its branch has asked, so a settled status is waited for until it has)."""
    import asyncio
    import time

    deadline = time.monotonic() + 20
    while True:
        record = await backend.wait(app, inv)
        if "adk_request_confirmation" in record.pending_tools.values():
            return record
        assert time.monotonic() < deadline, f"no confirmation asked: {record}"
        await asyncio.sleep(0.02)


async def test_a_call_confirmed_in_a_paused_branch_runs_on_a_worker_then_the_branch_goes_on(
    backend
):
    """The branch pauses on its worker for the confirmation; once approved, its call goes to a
    worker with the confirmation, and the branch's model reads the tool's real answer."""
    inv = await backend.enqueue("branch_confirm", "u", "go")
    record = await _asked(backend, "branch_confirm", inv)
    asked = [cid for cid, name in record.pending_tools.items() if name == "adk_request_confirmation"]
    assert await backend.tool_runs(inv) == []

    await backend.answer("branch_confirm", inv, asked[0], {"confirmed": True})
    record = await backend.wait("branch_confirm", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("branch_confirm", inv)
    x = [payload for author, payload in simplify_all(events) if author == "x"]
    assert x[-4:] == [
        ("response", "pay_out", {"error": (
            "This tool call requires confirmation, please approve or reject.")}),
        ("response", "pay_out", {"paid": 10}),
        "payout: {'paid': 10}",
        ("actions", {"end_of_agent": True}),
    ]
    assert [what for what, _ in await backend.tool_runs(inv)] == ["confirmed"]
    assert simplify_all([e for e in events if e.author == "after" and e.content]) == [
        ("after", "summary")]


async def test_a_confirmed_plain_routed_call_of_a_branch_made_on_a_worker_is_answered(backend):
    """The branch ran where nothing routes its tool, so its call does not wait for a later
    answer; approved, it runs where the branch goes on, and its answer is the branch's."""
    inv = await backend.enqueue("branch_routed", "u", "go")
    record = await _asked(backend, "branch_routed", inv)
    [request_id] = [cid for cid, name in record.pending_tools.items()
                    if name == "adk_request_confirmation"]
    await backend.answer("branch_routed", inv, request_id, {"confirmed": True})
    record = await backend.wait("branch_routed", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    x = [payload for author, payload in simplify_all(await backend.events("branch_routed", inv))
         if author == "x"]
    assert x[-3:-1] == [("response", "wire", {"wired": 5}), "x: {'wired': 5}"]
    assert [what for what, _ in await backend.tool_runs(inv)] == ["confirmed"]


def test_a_branch_routed_to_its_own_queue_runs_on_the_worker_of_that_queue(redis_url):
    import json

    import redis

    from config import Settings
    from tests.apps import APP_SPECS
    from tests.support.processes import stack_env, start_celery_process
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + "/7"
    redis.Redis.from_url(url).flushdb()
    routes = {"b": "special"}
    env = stack_env(url, APP_SPECS, agent_queues=json.dumps(routes))
    processes = [
        start_celery_process("orchestrator", "orch-route", env),
        start_celery_process("worker", "general", env, "-Q", "adk.tools,agents"),
        start_celery_process("worker", "special", env, "-Q", "special"),
    ]
    client = Client(Settings(redis_url=url, agent_queues=routes))
    try:
        inv = client.enqueue("parallel", "u", "go")
        record = client.wait("parallel", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        texts = {e.author: p.text for e in client.events("parallel", inv) if e.branch and e.content
                 for p in e.content.parts if p.text}
        pid_of = {name: int(re.search(r"pid (\d+)", text).group(1)) for name, text in texts.items()}
        assert pid_of["b"] == processes[2].pid
        assert pid_of["a"] == pid_of["c"] == processes[1].pid
    finally:
        client.close()
        for process in processes:
            process.stop()


async def test_every_branch_answer_is_on_the_dispatch_branch(backend):
    # Branches that call tools bring function responses of their own with their answer.
    inv = await backend.enqueue("tool_branches", "u", "go")
    record = await backend.wait("tool_branches", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("tool_branches", inv)

    dispatch = next(e for e in events if any(c.name == RUN_BRANCH for c in e.get_function_calls()))
    answers = [e for e in events if any(r.name == RUN_BRANCH for r in e.get_function_responses())]
    # Each answer is the dispatching agent's, on the dispatch's branch, the last one in too
    # (a tool's answer is on its call's branch the same way).
    assert [(e.author, e.branch) for e in answers] == [("fan", dispatch.branch)] * 2
    assert by_branch(events) == {
        "fan.p": [("p", ("call", "measure", {"what": "p"})), ("p", ("response", "measure", {"what": "p", "size": 1})),
                  ("p", "p measured 1")],
        "fan.q": [("q", ("call", "measure", {"what": "q"})), ("q", ("response", "measure", {"what": "q", "size": 1})),
                  ("q", "q measured 1")],
    }


async def test_nested_workflow_agents_inside_a_branch(backend):
    inv = await backend.enqueue("nested", "u", "go")
    record = await backend.wait("nested", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    branches = by_branch(await backend.events("nested", inv))
    assert branches["fan.steps"] == [("s1", "s1 done saw 1"), ("s2", "s2 read True")]
    assert branches["fan.solo"] == [("solo", "solo done saw 1")]


async def test_a_failing_branch_fails_the_invocation_as_in_process(backend):
    inv = await backend.enqueue("failing_branch", "u", "go")
    record = await backend.wait("failing_branch", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.FAILED
    assert "branch model exploded" in record.error
    events = await backend.events("failing_branch", inv)
    errors = [e for e in events if e.error_code]
    assert [(e.author, e.branch, e.error_code) for e in errors] == [("boom", "fan.boom", "RuntimeError")]


async def _waiting_calls(backend, app: str, inv: str, count: int) -> dict[tuple[str, str], str]:
    """Once ``count`` calls of the branches wait for answers: (branch, tool) -> call id."""
    import asyncio
    import time

    deadline = time.monotonic() + 20
    while True:
        record = await backend.wait(app, inv)
        waiting = [cid for cid, name in record.pending_tools.items() if name != RUN_BRANCH]
        if len(waiting) >= count:
            break
        assert time.monotonic() < deadline, f"not {count} calls waiting: {record}"
        await asyncio.sleep(0.02)
    events = await backend.events(app, inv)
    return {(e.branch, c.name): c.id for e in events for c in e.get_function_calls()
            if c.id in waiting}


async def test_two_branches_answered_back_to_back_both_go_on(backend):
    """The answers may be taken up together: each branch continues from its own answer
    (before, a branch took its sibling's answer for its own to continue, and recursed)."""
    inv = await backend.enqueue("two_ask", "u", "go")
    calls = await _waiting_calls(backend, "two_ask", inv, 2)
    await backend.answer("two_ask", inv, calls[("fan.x1", "ask")], {"a": 1})
    await backend.answer("two_ask", inv, calls[("fan.x2", "ask")], {"a": 2})
    record = await backend.wait("two_ask", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    texts = {(author, payload) for author, payload in simplify_all(await backend.events("two_ask", inv))
             if isinstance(payload, str)}
    assert {("x1", "heard {'a': 1}"), ("x2", "heard {'a': 2}"), ("after", "summary")} <= texts


async def test_an_answer_to_one_branch_leaves_the_other_paused_in_process():
    """In process too (google-adk reads a branch's own events to know what to resume)."""
    from tests.apps_branches import two_ask_app

    runner = InMemoryRunner(app=two_ask_app)
    session = await runner.session_service.create_session(app_name="two_ask", user_id="u")
    events = [e async for e in runner.run_async(user_id="u", session_id=session.id,
                                                new_message=user_text("go"))]
    calls = {e.branch: c for e in events for c in e.get_function_calls() if c.name == "ask"}
    answer = types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id=calls["fan.x2"].id, name="ask", response={"a": 2}))])
    more = [e async for e in runner.run_async(user_id="u", session_id=session.id, new_message=answer)]
    assert ("x2", "heard {'a': 2}") in simplify_all(more)
    assert {e.branch for e in more if e.branch} <= {"fan.x2", None, ""}, simplify_all(more)
    assert not any(e.author == "x1" for e in more)


async def test_a_confirmed_call_left_to_an_outside_answer_runs_once_while_its_sibling_goes_on(
    backend,
):
    """The holder's branch is continued again when the asker's answer comes, its last event
    still the approval: the hold's job, ended already, is not run a second time."""
    import asyncio

    inv = await backend.enqueue("branch_hold", "u", "go")
    calls = await _waiting_calls(backend, "branch_hold", inv, 2)
    await backend.answer("branch_hold", inv, calls[("fan.holder", "adk_request_confirmation")],
                         {"confirmed": True})
    calls = await _waiting_calls(backend, "branch_hold", inv, 2)  # ask, and hold's own call
    hold_id = calls[("fan.holder", "hold")]
    while not await backend.left_to_outside("branch_hold", inv, hold_id):
        await asyncio.sleep(0.02)  # until the hold's job has run and ended
    await backend.answer("branch_hold", inv, calls[("fan.asker", "ask")], {"a": "yes"})
    await _waiting_calls(backend, "branch_hold", inv, 1)
    await backend.answer("branch_hold", inv, hold_id, {"settled": True})
    record = await backend.wait("branch_hold", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert [what for what, _ in await backend.tool_runs(inv)] == ["hold"]  # once


async def test_a_loop_around_the_branches_runs_them_on_every_pass(backend):
    inv = await backend.enqueue("loop_fan", "u", "go")
    record = await backend.wait("loop_fan", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    said = [payload for _, payload in simplify_all(await backend.events("loop_fan", inv))
            if payload in ("a said", "b said")]
    assert sorted(said) == ["a said", "a said", "b said", "b said"]


async def test_a_branch_that_escalates_ends_the_loop(backend):
    inv = await backend.enqueue("loop_exit", "u", "go")
    record = await backend.wait("loop_exit", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("loop_exit", inv)
    assert [payload for _, payload in simplify_all(events) if payload == "b done"] == ["b done"]


async def test_a_failed_branch_fails_the_invocation_while_its_sibling_waits(backend):
    inv = await backend.enqueue("fail_wait", "u", "go")
    record = await backend.wait("fail_wait", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.FAILED, record
    assert "exploded" in (record.error or "")


async def test_a_branch_whose_long_running_tool_answers_at_once_ends_and_does_not_pause(backend):
    inv = await backend.enqueue("quick_fan", "u", "go")
    record = await backend.wait("quick_fan", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, (record.status, record.pending_calls)
    texts = simplify_all(await backend.events("quick_fan", inv))
    assert ("q", "got {'answer': 'known: ?'}") in texts and ("r", "r done") in texts
