"""The distributed protocol in one process: remote calls pause and resume the invocation."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator import App, LlmAgent, LongRunningFunctionTool, ToolContext
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus, ToolResult, WorkItem
from orchestrator.distributed.registry import AppRegistry
from orchestrator.errors import AnswerRejectedError
from orchestrator.models.fake import ScriptedLlm
from tests.support.events import call, simplify_all

RAN: list[str] = []


def slow_lookup(city: str, tool_context: ToolContext) -> dict:
    """Look something up (long-running)."""
    RAN.append(city)
    tool_context.state["looked_up"] = city
    return {"city": city, "found": True}


def approval(amount: int) -> None:
    """Needs a human."""
    return None


def exploding(x: int) -> dict:
    """Raises."""
    raise RuntimeError("tool blew up")


def runtime_for(*responses, tools=None, name="app", **agent_kwargs):
    model = ScriptedLlm(responses=list(responses))
    agent = LlmAgent(name="agent", model=model, tools=tools or [], **agent_kwargs)
    return EmbeddedRuntime(AppRegistry([App(name=name, root_agent=agent)])), model


async def test_remote_call_pauses_then_resumes_with_the_result_and_state_delta():
    RAN.clear()
    rt, model = runtime_for(call("slow_lookup", city="Oslo"), "Oslo found",
                            tools=[LongRunningFunctionTool(slow_lookup)])
    inv = await rt.enqueue(app_name="app", user_id="u", new_message="look up Oslo")
    record = await rt.wait("app", inv, timeout=5, until=InvocationStatus.FINISHED)

    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await rt.events("app", inv)
    assert simplify_all(events) == [
        ("user", "look up Oslo"),
        ("agent", ("call", "slow_lookup", {"city": "Oslo"})),
        ("agent", ("response", "slow_lookup", {"city": "Oslo", "found": True})),
        ("agent", "Oslo found"),
    ]
    assert events[1].long_running_tool_ids == {events[1].content.parts[0].function_call.id}
    assert events[2].actions.state_delta == {"looked_up": "Oslo"}
    assert RAN == ["Oslo"]


def note_city(city: str, tool_context: ToolContext) -> dict:
    """Note a city (long-running): changes a list read from state in place."""
    tool_context.state["seen"].append(city)
    return {"noted": city}


async def test_a_remote_tools_write_into_a_list_read_from_state_is_recorded():
    rt, _ = runtime_for(call("note_city", city="Oslo"), "noted",
                        tools=[LongRunningFunctionTool(note_city)])
    session = await rt.session_service.create_session(app_name="app", user_id="u",
                                                      state={"seen": ["Rome"]})
    inv = await rt.enqueue(app_name="app", user_id="u", session_id=session.id,
                           new_message="note Oslo")
    record = await rt.wait("app", inv, timeout=5, until=InvocationStatus.FINISHED)

    assert record.status is InvocationStatus.COMPLETED, record.error
    answer = (await rt.events("app", inv))[2]
    assert answer.actions.state_delta == {"seen": ["Rome", "Oslo"]}
    stored = await rt.session_service.get_session(app_name="app", user_id="u",
                                                  session_id=session.id)
    assert stored.state["seen"] == ["Rome", "Oslo"]


async def test_parallel_remote_calls_resume_once_with_all_answers():
    RAN.clear()
    rt, model = runtime_for([call("slow_lookup", city="A"), call("slow_lookup", city="B")], "both",
                            tools=[LongRunningFunctionTool(slow_lookup)])
    inv = await rt.enqueue(app_name="app", user_id="u", new_message="go")
    record = await rt.wait("app", inv, timeout=5, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await rt.events("app", inv)
    responses = [e for e in events if e.get_function_responses()]
    assert len(responses) == 1 and len(responses[0].get_function_responses()) == 2
    assert model.call_count == 2
    assert sorted(RAN) == ["A", "B"]


@pytest.mark.parametrize("from_start", [True, False])
async def test_a_follow_right_after_an_answer_goes_on_to_what_the_answer_brings(from_start):
    # README's flow in process: follow stops at the pause, answer, follow again. The
    # answer's resume is queued, not yet run: the pause it ends is no place to stop.
    rt, _ = runtime_for(call("approval", amount=5), "approved!",
                        tools=[LongRunningFunctionTool(approval)])
    inv = await rt.enqueue(app_name="app", user_id="u", new_message="pay")
    first = [item async for item in rt.follow("app", inv, timeout=5)]
    assert first[-1].status is InvocationStatus.PAUSED
    call_id = (await rt.status("app", inv)).pending_calls[0]

    await rt.answer("app", inv, call_id, {"ok": True})
    after = [item async for item in rt.follow("app", inv, from_start=from_start, timeout=5)]

    assert after[-1].status is InvocationStatus.COMPLETED
    assert [i.event.content.parts[0].text for i in after
            if i.event is not None and i.event.content and i.event.content.parts[0].text] \
        == (["pay", "approved!"] if from_start else ["approved!"])


async def test_pending_call_answered_from_outside_and_bad_answers_rejected():
    rt, model = runtime_for(call("approval", amount=5), "approved!", tools=[LongRunningFunctionTool(approval)])
    inv = await rt.enqueue(app_name="app", user_id="u", new_message="pay")
    record = await rt.wait("app", inv, timeout=5)
    assert record.status is InvocationStatus.PAUSED
    [call_id] = record.pending_calls

    with pytest.raises(AnswerRejectedError, match="no pending call"):
        await rt.answer("app", inv, "adk-bogus", {"ok": True})
    await rt.answer("app", inv, call_id, {"approved": True})
    record = await rt.wait("app", inv, timeout=5, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    with pytest.raises(AnswerRejectedError):
        await rt.answer("app", inv, call_id, {"approved": False})
    events = await rt.events("app", inv)
    assert simplify_all(events)[-2:] == [("user", ("response", "approval", {"approved": True})), ("agent", "approved!")]
    assert len(events) == 4  # nothing appended by the rejected answers


async def test_answers_of_one_request_are_stored_together_or_not_at_all():
    rt, _ = runtime_for([call("approval", amount=1), call("approval", amount=2)], "both in",
                        tools=[LongRunningFunctionTool(approval)])
    inv = await rt.enqueue(app_name="app", user_id="u", new_message="pay twice")
    first, second = (await rt.wait("app", inv, timeout=5)).pending_calls
    await rt.service.queue.push_answers(  # the second is answered first, elsewhere
        ("app", "u", (await rt.service.store.get("app", inv)).session_id),
        WorkItem(kind="resume", invocation_id=inv),
        [ToolResult(function_call_id=second, tool_name="approval", response={"ok": 2})])

    with pytest.raises(AnswerRejectedError, match="already answered"):
        await rt.service.answer_all("app", inv, [(first, {"ok": 1}), (second, {"ok": 3})])
    stored = (await rt.service.store.results("app", inv)).get(first)
    assert stored is None or stored.response is None  # none of it stored (at most the
    # tool's own pending placeholder, once its job has run)

    await rt.answer("app", inv, first, {"ok": 1})
    record = await rt.wait("app", inv, timeout=5, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    answers = [r.response for e in await rt.events("app", inv) for r in e.get_function_responses()]
    assert sorted(a["ok"] for a in answers) == [1, 2]


async def test_remote_tool_error_is_an_error_response_the_model_reads():
    rt, model = runtime_for(call("exploding", x=1), "sorry", tools=[],
                            )
    rt.registry.get("app").root_agent.tools.append(LongRunningFunctionTool(exploding))
    inv = await rt.enqueue(app_name="app", user_id="u", new_message="go")
    record = await rt.wait("app", inv, timeout=5, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED
    events = await rt.events("app", inv)
    assert simplify_all(events)[2] == ("agent", ("response", "exploding", {"error": "RuntimeError: tool blew up"}))


async def test_unknown_app_and_unknown_session_fail_with_clear_errors():
    rt, _ = runtime_for("hi")
    inv = await rt.enqueue(app_name="nope", user_id="u", session_id="s", new_message="x")
    record = await rt.wait("nope", inv, timeout=5)
    assert record.status is InvocationStatus.FAILED and "unknown app 'nope'" in record.error
    inv = await rt.enqueue(app_name="app", user_id="u", session_id="missing", new_message="x")
    record = await rt.wait("app", inv, timeout=5)
    assert record.status is InvocationStatus.FAILED and "missing" in record.error


async def test_two_messages_to_one_session_are_processed_in_order():
    rt, model = runtime_for("first answer", "second answer")
    session = await rt.session_service.create_session(app_name="app", user_id="u")
    a = await rt.enqueue(app_name="app", user_id="u", session_id=session.id, new_message="one")
    b = await rt.enqueue(app_name="app", user_id="u", session_id=session.id, new_message="two")
    await asyncio.gather(rt.wait("app", a, timeout=5), rt.wait("app", b, timeout=5))
    stored = await rt.session_service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert simplify_all(stored.events) == [
        ("user", "one"), ("agent", "first answer"), ("user", "two"), ("agent", "second answer"),
    ]


async def test_cancel_a_paused_invocation():
    rt, _ = runtime_for(call("approval", amount=5), tools=[LongRunningFunctionTool(approval)])
    inv = await rt.enqueue(app_name="app", user_id="u", new_message="pay")
    record = await rt.wait("app", inv, timeout=5)
    [call_id] = record.pending_calls
    await rt.cancel("app", inv)
    record = await rt.wait("app", inv, timeout=5, until={InvocationStatus.CANCELLED})
    with pytest.raises(AnswerRejectedError, match="cancelled"):
        await rt.answer("app", inv, call_id, {"ok": 1})
