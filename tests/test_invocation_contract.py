"""One contract, two backends: the invocation protocol in process and over Celery + Redis.

The Celery backend runs a real redis-server, a real orchestrator process and a real worker
process started by the tests.
"""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.distributed.models import InvocationStatus
from orchestrator.errors import AnswerRejectedError, RequestError, SessionNotFoundError
from tests.support.backends import CeleryBackend
from tests.support.events import simplify_all


async def test_remote_tool_pauses_and_resumes_the_invocation(backend, request):
    inv = await backend.enqueue("lookup", "u", "look up Oslo")
    record = await backend.wait("lookup", inv, until=InvocationStatus.FINISHED)

    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("lookup", inv)
    shape = simplify_all(events)
    assert [author for author, _ in shape] == ["user", "agent", "agent", "agent"]
    assert shape[1] == ("agent", ("call", "slow_lookup", {"city": "Oslo"}))
    call_id = events[1].content.parts[0].function_call.id
    assert events[1].long_running_tool_ids == {call_id}
    response = events[2].content.parts[0].function_response
    assert response.id == call_id and response.response.get("found") is True, response.response
    assert events[2].actions.state_delta == {"looked_up": "Oslo"}
    assert {e.invocation_id for e in events} == {inv}
    if isinstance(backend, CeleryBackend):
        stack = backend.stack
        # The tool ran in a worker process: neither here nor in the orchestrator.
        worker_pids = {stack["worker"].pid} | _children(stack["worker"].pid)
        assert response.response["pid"] in worker_pids
        assert response.response["pid"] not in {stack["orchestrator"].pid} | _children(stack["orchestrator"].pid)


def _children(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return {int(p) for p in f.read().split()}
    except OSError:
        return set()


async def test_several_calls_of_one_turn_resume_once_with_all_answers(backend):
    inv = await backend.enqueue("fanout", "u", "go")
    record = await backend.wait("fanout", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("fanout", inv)
    answers = [e for e in events if e.get_function_responses()]
    assert len(answers) == 1 and len(answers[0].get_function_responses()) == 2
    assert simplify_all(events)[-1] == ("agent", "both: Oslo, Rome")


async def test_blocking_calls_of_one_turn_run_at_the_same_time(backend):
    # Each call blocks until the other one arrives: run one after the other (or on one
    # thread), both would time out and answer with an error.
    inv = await backend.enqueue("rendezvous", "u", "go")
    record = await backend.wait("rendezvous", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("rendezvous", inv)
    answers = [r.response for e in events for r in e.get_function_responses()]
    assert [a.get("met") for a in answers] == [True, True], answers
    assert len({a["thread"] for a in answers}) == 2
    assert simplify_all(events)[-1] == ("agent", "met: a, b")


async def test_pending_call_answered_from_outside(backend):
    inv = await backend.enqueue("approval", "u", "pay")
    record = await backend.wait("approval", inv)
    assert record.status is InvocationStatus.PAUSED, record.error
    [call_id] = record.pending_calls
    before = len(await backend.events("approval", inv))

    with pytest.raises(AnswerRejectedError, match="no pending call"):
        await backend.answer("approval", inv, "adk-not-a-call", {"approved": True})
    assert len(await backend.events("approval", inv)) == before  # nothing appended

    await backend.answer("approval", inv, call_id, {"approved": True})
    record = await backend.wait("approval", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    with pytest.raises(AnswerRejectedError):
        await backend.answer("approval", inv, call_id, {"approved": False})
    events = await backend.events("approval", inv)
    assert simplify_all(events)[-2:] == [
        ("user", ("response", "request_approval", {"approved": True})),
        ("agent", "approval: {'approved': True}"),
    ]


GUARDED = {
    # app: (tool, its arguments, its result once confirmed, what the model says before it)
    "guarded": ("pay_out", {"amount": 10}, {"paid": 10}, "payout"),
    # A tool whose own run_async does not check its confirmation rule: only the flow's gate
    # keeps it from running unconfirmed on a worker.
    "safe": ("open_safe", {}, {"opened": "confirmed"}, "safe"),
}
REQUIRES_CONFIRMATION = {"error": "This tool call requires confirmation, please approve or reject."}


async def _paused_for_confirmation(backend, app: str) -> tuple[str, str, str]:
    """Start ``app``'s invocation; it pauses for the confirmation. (invocation, call, request)."""
    tool, args, _, _ = GUARDED[app]
    inv = await backend.enqueue(app, "u", "pay")
    record = await backend.wait(app, inv)
    assert record.status is InvocationStatus.PAUSED, record.error
    [request_id] = record.pending_calls  # the call itself waits for it, not for a job
    events = await backend.events(app, inv)
    shape = simplify_all(events)
    assert shape[1:] == [
        ("agent", ("call", tool, args)),
        ("agent", ("call", "adk_request_confirmation", shape[2][1][2])),
        ("agent", ("response", tool, REQUIRES_CONFIRMATION)),
    ]
    call_id = events[1].content.parts[0].function_call.id
    assert events[2].content.parts[0].function_call.args["originalFunctionCall"]["id"] == call_id
    return inv, call_id, request_id


@pytest.mark.parametrize("app", sorted(GUARDED))
async def test_a_remote_tool_that_needs_a_confirmation_does_not_run_before_it(backend, app):
    """Its job is not sent with the call: the call waits for the confirmation, and a
    rejected call is answered with the rejection, its tool never run."""
    tool, _, _, prefix = GUARDED[app]
    inv, _, request_id = await _paused_for_confirmation(backend, app)

    await backend.answer(app, inv, request_id, {"confirmed": False})
    record = await backend.wait(app, inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert simplify_all(await backend.events(app, inv))[4:] == [
        ("user", ("response", "adk_request_confirmation", {"confirmed": False})),
        ("agent", ("response", tool, {"error": "This tool call is rejected."})),
        ("agent", f"{prefix}: {{'error': 'This tool call is rejected.'}}"),
    ]
    assert await backend.tool_runs(inv) == []


@pytest.mark.parametrize("app", sorted(GUARDED))
async def test_a_confirmed_remote_tool_runs_on_a_worker_once_then_the_model_reads_its_answer(
    backend, app
):
    """google-adk's sequence: the provisional answer, the approval, the tool's real answer
    (here from a worker, with the confirmation in its tool context), then the model."""
    tool, _, result, prefix = GUARDED[app]
    inv, call_id, request_id = await _paused_for_confirmation(backend, app)
    with pytest.raises(AnswerRejectedError):  # nobody answers the call past its confirmation
        await backend.answer(app, inv, call_id, {"paid": 1_000_000})

    await backend.answer(app, inv, request_id, {"confirmed": True})
    record = await backend.wait(app, inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert record.pending_calls == []
    events = await backend.events(app, inv)
    assert simplify_all(events)[4:] == [
        ("user", ("response", "adk_request_confirmation", {"confirmed": True})),
        ("agent", ("response", tool, result)),  # before the model is called again
        ("agent", f"{prefix}: {result}"),  # the model read the real answer, not the gate's
    ]
    answers = [(e.actions.requested_tool_confirmations, r.response)
               for e in events for r in e.get_function_responses() if r.id == call_id]
    assert [(bool(asked), response) for asked, response in answers] == [
        (True, REQUIRES_CONFIRMATION), (False, result)]  # one real answer, after the gate's
    runs = await backend.tool_runs(inv)
    assert [what for what, _ in runs] == ["confirmed"]  # once, with its confirmation
    if isinstance(backend, CeleryBackend):
        worker = backend.stack["worker"].pid
        assert runs[0][1] in {worker} | _children(worker)  # on the worker


async def test_calls_of_one_turn_confirmed_and_rejected_get_one_real_answer_each(backend):
    """The rejected call is answered at once, the approved one by its worker; the model goes
    on once both have their real answers."""
    inv = await backend.enqueue("guarded_pair", "u", "pay")
    record = await backend.wait("guarded_pair", inv)
    assert record.status is InvocationStatus.PAUSED, record.error
    events = await backend.events("guarded_pair", inv)
    ten, twenty = [c.id for c in events[1].get_function_calls()]
    requests = {c.args["originalFunctionCall"]["id"]: c.id for c in events[2].get_function_calls()}
    assert sorted(record.pending_calls) == sorted(requests.values())

    await backend.answer("guarded_pair", inv, requests[ten], {"confirmed": True})
    await backend.answer("guarded_pair", inv, requests[twenty], {"confirmed": False})
    record = await backend.wait("guarded_pair", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("guarded_pair", inv)
    answers = {cid: [r.response for e in events for r in e.get_function_responses() if r.id == cid]
               for cid in (ten, twenty)}
    rejected = {"error": "This tool call is rejected."}
    assert answers == {ten: [REQUIRES_CONFIRMATION, {"paid": 10}],
                       twenty: [REQUIRES_CONFIRMATION, rejected]}
    texts = [e.content.parts[0].text for e in events if e.author == "agent" and e.content
             and e.content.parts[0].text]
    assert texts == [f"payouts: {{'paid': 10}}, {rejected}"]  # one model call, after both
    assert [what for what, _ in await backend.tool_runs(inv)] == ["confirmed"]


async def test_an_agent_waits_for_its_confirmed_remote_call_even_when_another_answer_ends_its_turn(
    backend,
):
    """Both calls of a turn approved (the approvals of one turn are taken up together):
    ``finish`` ends the turn (no summary), ``pay_out`` runs where remote tools run. The
    agent waits for pay_out's real answer before the pipeline goes on."""
    inv = await backend.enqueue("guarded_final", "u", "go")
    record = await backend.wait("guarded_final", inv)
    assert record.status is InvocationStatus.PAUSED, record.error
    events = await backend.events("guarded_final", inv)
    [pay_id] = [c.id for e in events for c in e.get_function_calls() if c.name == "pay_out"]
    for request_id in record.pending_calls:
        await backend.answer("guarded_final", inv, request_id, {"confirmed": True})
    record = await backend.wait("guarded_final", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("guarded_final", inv)
    paid = [i for i, e in enumerate(events) for r in e.get_function_responses()
            if r.id == pay_id and r.response == {"paid": 10}]
    b_ran = [i for i, e in enumerate(events) if simplify_all([e])[0] == ("b", "b ran")]
    assert len(paid) == 1 and len(b_ran) == 1 and paid[0] < b_ran[0], simplify_all(events)
    assert [what for what, _ in await backend.tool_runs(inv)] == ["confirmed"]
    assert [what for what, _ in await backend.tool_runs(f"finish:{inv}")] == ["confirmed"]


async def test_a_confirmation_rule_is_asked_once_per_call(backend):
    """A rule that would answer differently the second time does not let the call through:
    the flow decides on one answer of the rule (``fickle``: True, then False)."""
    inv = await backend.enqueue("fickle", "u", "open")
    record = await backend.wait("fickle", inv)
    assert record.status is InvocationStatus.PAUSED, record.error
    assert list(record.pending_tools.values()) == ["adk_request_confirmation"]
    assert await backend.tool_runs(inv) == []

async def test_an_answer_to_a_confirmation_that_is_no_confirmation_is_refused_naming_the_field(
    backend,
):
    """Refused when it is sent (not a failed invocation when it is read), nothing stored:
    the confirmation still waits, and a well-formed answer still goes through."""
    inv, _, request_id = await _paused_for_confirmation(backend, "guarded")
    for bad, field in (({"confirmed": True, "note": "ok by me"}, "response.note"),
                       ({"confirmed": "maybe"}, "response.confirmed"),
                       ({"response": "{not json"}, "response.response")):
        with pytest.raises(RequestError) as refused:
            await backend.answer("guarded", inv, request_id, bad)
        assert refused.value.field == field, refused.value
    record = await backend.wait("guarded", inv)
    assert record.status is InvocationStatus.PAUSED and record.pending_calls == [request_id]
    await backend.answer("guarded", inv, request_id, {"confirmed": False})
    record = await backend.wait("guarded", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error


async def test_custom_metadata_reaches_every_event_also_after_a_pause(backend):
    """``custom_metadata`` of the enqueue, as ``RunConfig.custom_metadata`` in process."""
    inv = await backend.enqueue("approval", "u", "pay", custom_metadata={"ticket": "T-1"})
    record = await backend.wait("approval", inv)
    assert record.status is InvocationStatus.PAUSED, record.error
    await backend.answer("approval", inv, record.pending_calls[0], {"approved": True})
    record = await backend.wait("approval", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("approval", inv)
    assert len(events) == 4  # the message, the call, the outside answer, the final text
    assert [e.custom_metadata for e in events] == [{"ticket": "T-1"}] * 4


async def test_custom_metadata_that_is_not_an_object_is_refused_naming_it(backend):
    try:
        inv = await backend.enqueue("approval", "u", "pay", custom_metadata=["not", "a", "map"])
    except RequestError as error:  # in process: refused before anything is stored
        assert "custom_metadata" in str(error)
        return
    record = await backend.wait("approval", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.FAILED and "custom_metadata" in record.error
    assert await backend.events("approval", inv) == []


async def test_tool_error_on_a_worker_is_a_response_the_model_reads(backend):
    inv = await backend.enqueue("exploding", "u", "go")
    record = await backend.wait("exploding", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("exploding", inv)
    assert simplify_all(events)[2] == (
        "agent", ("response", "exploding", {"error": "RuntimeError: tool blew up on 7"}))
    assert "tool blew up" in simplify_all(events)[3][1]


async def test_unknown_app_or_session_is_said_clearly(backend):
    # In process the invocation fails saying why; the Client (which knows its apps) refuses
    # the enqueue, storing nothing (README: Client), as the API answers 404.
    for app, session_id, said in (("no_such_app", "s1", "unknown app 'no_such_app'"),
                                  ("chat", "missing-session", "missing-session")):
        if isinstance(backend, CeleryBackend):
            with pytest.raises((RequestError, SessionNotFoundError)) as refused:
                await backend.enqueue(app, "u", "x", session_id=session_id)
            assert said.removeprefix("unknown app ") in str(refused.value)
            continue
        inv = await backend.enqueue(app, "u", "x", session_id=session_id)
        record = await backend.wait(app, inv, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.FAILED and said in record.error


async def test_two_messages_to_one_session_are_both_processed_in_order(backend):
    sid = await backend.create_session("chat", "u")
    first, second = await asyncio.gather(
        backend.enqueue("chat", "u", "one", session_id=sid),
        backend.enqueue("chat", "u", "two", session_id=sid),
    )
    for inv in (first, second):
        assert (await backend.wait("chat", inv, until=InvocationStatus.FINISHED)).status is InvocationStatus.COMPLETED
    a, b = await backend.events("chat", first), await backend.events("chat", second)
    assert [simplify_all(x) for x in (a, b)] in (
        [[("user", "one"), ("agent", "reply to one")], [("user", "two"), ("agent", "reply to two")]],
    ) or simplify_all(a)[1][1] == "reply to one"
    # Never interleaved: each invocation's reply directly follows its own message.
    assert b[0].timestamp > a[-1].timestamp or a[0].timestamp > b[-1].timestamp


async def test_cancel_a_paused_invocation(backend):
    inv = await backend.enqueue("approval", "u", "pay")
    record = await backend.wait("approval", inv)
    assert record.status is InvocationStatus.PAUSED
    [call_id] = record.pending_calls
    await backend.cancel("approval", inv)
    record = await backend.wait("approval", inv, until={InvocationStatus.CANCELLED})
    assert record.pending_calls == []  # its call got an error answer (tests/test_cancel.py)
    with pytest.raises(AnswerRejectedError, match="cancelled"):
        await backend.answer("approval", inv, call_id, {"approved": True})


def test_async_tools_on_a_worker_share_one_event_loop(celery_stack):
    # Three overlapping calls of an async tool that keeps one loop-bound client (as tools
    # built on an async HTTP client do): every call must run on the loop that opened it.
    client = celery_stack["client"]
    inv = client.enqueue("loopbound", "u", "go")
    record = client.wait("loopbound", inv, timeout=30, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    answers = [r.response for e in client.events("loopbound", inv)
               for r in e.get_function_responses()]
    assert sorted(a.get("value") for a in answers) == ["A", "B", "C"], answers


def test_a_tool_job_queued_for_a_cancelled_invocation_never_runs(celery_stack):
    import redis

    from tests.apps import APP_SPECS, PARKED_QUEUE
    from tests.support.processes import stack_env, start_celery_process

    client, url = celery_stack["client"], celery_stack["url"]
    inv = client.enqueue("parked", "u", "cancelled-before-pickup")
    assert client.wait("parked", inv, timeout=30).status is InvocationStatus.PAUSED
    client.cancel("parked", inv)
    assert client.wait("parked", inv, timeout=30, until=frozenset({InvocationStatus.CANCELLED}))
    # Only now does a worker consume the queue the job waits in.
    worker = start_celery_process("worker", "parked", stack_env(url, APP_SPECS),
                                  "-Q", PARKED_QUEUE)
    try:
        worker.wait_for_line(lambda line: "skipped: invocation cancelled" in line)
    finally:
        worker.stop()
    assert not redis.Redis.from_url(url).exists("test:parked:cancelled-before-pickup")
    assert client.status("parked", inv).status is InvocationStatus.CANCELLED



def test_a_plain_tools_call_on_a_worker_is_answered_by_the_tool_not_from_outside(celery_stack):
    # A plain tool's answer is what it returns: a client cannot answer for it, even while its
    # job waits in a queue no worker reads (a long-running tool's call, it can).
    from orchestrator.errors import AnswerRejectedError

    client = celery_stack["client"]
    plain = client.enqueue("parked_plain", "u", "only-the-tool")
    assert client.wait("parked_plain", plain, timeout=30).status is InvocationStatus.PAUSED
    [call] = client.status("parked_plain", plain).pending_calls
    with pytest.raises(AnswerRejectedError, match="answered by the tool itself"):
        client.answer("parked_plain", plain, call, {"tag": "forged"})
    assert client.status("parked_plain", plain).pending_calls == [call]
    client.cancel("parked_plain", plain)

    long_running = client.enqueue("parked", "u", "answered-outside")
    assert client.wait("parked", long_running, timeout=30).status is InvocationStatus.PAUSED
    [call] = client.status("parked", long_running).pending_calls
    client.answer("parked", long_running, call, {"tag": "from a human"})
    record = client.wait("parked", long_running, timeout=30, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error


def test_a_temp_value_sent_with_an_enqueue_is_used_and_then_kept_nowhere(celery_stack):
    # A temp: value is for the invocation that gets it (a per-request key, say): it is not
    # written to the session, and once the start has it, Redis keeps it nowhere either (not
    # in the record, not in the status entries every watcher reads).
    import redis

    client = celery_stack["client"]
    inv = client.enqueue("temp_key", "u", "hello", state_delta={"temp:key": "s3cr3t-value",
                                                                "note": "kept"})
    record = client.wait("temp_key", inv, timeout=30, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    final = client.events("temp_key", inv)[-1]
    assert final.content.parts[0].text == "the key has 12 characters"  # the start saw it

    found = []
    with redis.Redis.from_url(celery_stack["url"]) as check:
        for key in check.scan_iter(count=1000):
            kind = check.type(key)
            values: list = []
            if kind == b"string":
                values = [check.get(key)]
            elif kind == b"hash":
                values = list(check.hgetall(key).values())
            elif kind == b"list":
                values = check.lrange(key, 0, -1)
            elif kind == b"stream":
                values = [v for _, fields in check.xrange(key) for v in fields.values()]
            elif kind == b"zset":
                values = check.zrange(key, 0, -1)
            elif kind == b"set":
                values = list(check.smembers(key))
            found += [key for v in values if b"s3cr3t-value" in v]
    assert found == []
    assert client.status("temp_key", inv).state_delta == {"note": "kept"}


def test_a_second_message_waits_for_the_first_while_its_plain_tool_runs(celery_stack):
    # In process a plain tool's call blocks its invocation; on a worker it pauses it, and the
    # session's second message used to run in that pause: the first invocation's model then
    # answered with the second message and its call in its history.
    import time

    import redis

    from orchestrator.backends.redis import keys
    from tests.apps import APP_SPECS, PARKED_QUEUE
    from tests.support.processes import stack_env, start_celery_process

    client, url = celery_stack["client"], celery_stack["url"]
    first = client.enqueue("parked_plain", "u", "first")
    assert client.wait("parked_plain", first, timeout=30).status is InvocationStatus.PAUSED
    session_id = client.status("parked_plain", first).session_id
    second = client.enqueue("parked_plain", "u", "second", session_id=session_id)
    held = keys.session_held("parked_plain", "u", session_id)
    redis_client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 30
    while not redis_client.llen(held):  # the orchestrator took the second message: held
        assert time.monotonic() < deadline, client.status("parked_plain", second)
        assert client.status("parked_plain", second).status is InvocationStatus.QUEUED
        time.sleep(0.05)
    worker = start_celery_process("worker", "parked-busy", stack_env(url, APP_SPECS),
                                  "-Q", PARKED_QUEUE)
    try:
        for inv in (first, second):
            record = client.wait("parked_plain", inv, timeout=30, until=InvocationStatus.FINISHED)
            assert record.status is InvocationStatus.COMPLETED, record.error
    finally:
        worker.stop()
    ran_first, ran_second = (client.events("parked_plain", inv) for inv in (first, second))
    assert simplify_all(ran_first)[-1] == ("agent", "ran first")
    assert ran_first[-1].timestamp < ran_second[0].timestamp  # one after the other
