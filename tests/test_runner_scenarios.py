"""adk-reference §11 scenarios 1-8, 18 and 21, run in process with scripted models."""

from __future__ import annotations

import asyncio

import pytest
from google.genai import types

from orchestrator import (
    Event,
    InMemoryRunner,
    LlmAgent,
    LlmResponse,
    LongRunningFunctionTool,
    RunConfig,
    StreamingMode,
    ToolContext,
)
from orchestrator.errors import LlmCallsLimitExceededError
from orchestrator.models.fake import Chunks, ScriptedLlm
from tests.support.events import call, function_response, request_summary, simplify_all, user_text


async def run(runner: InMemoryRunner, session_id: str, message, **kwargs) -> list[Event]:
    return [
        e async for e in runner.run_async(
            user_id="u", session_id=session_id, new_message=message, **kwargs
        )
    ]


async def new_session(runner: InMemoryRunner, **state) -> str:
    session = await runner.session_service.create_session(
        app_name=runner.app_name, user_id="u", state=state or None
    )
    return session.id


async def stored_events(runner: InMemoryRunner, session_id: str) -> list[Event]:
    session = await runner.session_service.get_session(
        app_name=runner.app_name, user_id="u", session_id=session_id
    )
    assert session is not None
    return session.events


async def test_plain_reply_is_final_and_persisted_after_the_user_event():
    model = ScriptedLlm(responses=["hello"])
    runner = InMemoryRunner(LlmAgent(name="root", model=model))
    sid = await new_session(runner)

    events = await run(runner, sid, user_text("hi"))

    assert simplify_all(events) == [("root", "hello")]
    assert events[0].is_final_response()
    assert events[0].invocation_id.startswith("e-")
    stored = await stored_events(runner, sid)
    assert [(e.author, e.content.parts[0].text) for e in stored] == [("user", "hi"), ("root", "hello")]
    assert stored[0].invocation_id == events[0].invocation_id


def get_weather(city: str, tool_context: ToolContext) -> dict:
    """Return the weather for a city."""
    tool_context.state["last_city"] = city
    return {"temp": 20, "city": city}


async def test_single_tool_with_output_key():
    model = ScriptedLlm(responses=[call("get_weather", city="Paris"), "It is 20"])
    runner = InMemoryRunner(
        LlmAgent(name="root", model=model, tools=[get_weather], output_key="answer")
    )
    sid = await new_session(runner)

    events = await run(runner, sid, user_text("weather?"))

    assert simplify_all(events) == [
        ("root", ("call", "get_weather", {"city": "Paris"})),
        ("root", ("response", "get_weather", {"temp": 20, "city": "Paris"})),
        ("root", "It is 20"),
    ]
    fc, fr, text = events
    assert not fc.is_final_response() and not fr.is_final_response() and text.is_final_response()
    assert fc.content.parts[0].function_call.id.startswith("adk-")
    assert fc.long_running_tool_ids == set()
    assert fr.content.role == "user"
    assert fr.content.parts[0].function_response.id == fc.content.parts[0].function_call.id
    assert fr.actions.state_delta == {"last_city": "Paris"}
    assert text.actions.state_delta == {"answer": "It is 20"}
    # The second model call sees the call and its answer, with client ids stripped.
    assert request_summary(model.requests[1].contents) == [
        "user|text:weather?",
        "model|call:get_weather:None",
        "user|resp:get_weather:None:{'temp': 20, 'city': 'Paris'}",
    ]
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=sid)
    assert session.state == {"last_city": "Paris", "answer": "It is 20"}


async def test_parallel_calls_run_concurrently_and_merge_into_one_event():
    a_started, b_started = asyncio.Event(), asyncio.Event()

    async def tool_a(tool_context: ToolContext) -> str:
        """A."""
        a_started.set()
        await asyncio.wait_for(b_started.wait(), 5)  # deadlocks unless run concurrently
        tool_context.state["a"] = 1
        return "A"

    async def tool_b(tool_context: ToolContext) -> str:
        """B."""
        b_started.set()
        await asyncio.wait_for(a_started.wait(), 5)
        tool_context.state["b"] = 2
        return "B"

    model = ScriptedLlm(responses=[[call("tool_a").model_copy(), call("tool_b")], "done"])
    runner = InMemoryRunner(LlmAgent(name="root", model=model, tools=[tool_a, tool_b]))
    sid = await new_session(runner)

    events = await run(runner, sid, user_text("go"))

    assert simplify_all(events) == [
        ("root", [("call", "tool_a", {}), ("call", "tool_b", {})]),
        ("root", [("response", "tool_a", {"result": "A"}), ("response", "tool_b", {"result": "B"})]),
        ("root", "done"),
    ]
    assert events[1].actions.state_delta == {"a": 1, "b": 2}


def request_approval(amount: int):
    """Ask a human to approve a payment."""
    CALLS.append(amount)
    return None


def request_approval_pending(amount: int) -> dict:
    """Ask a human to approve a payment; returns a ticket."""
    CALLS.append(amount)
    return {"status": "pending", "ticket": "T-1"}


CALLS: list[int] = []


async def test_long_running_tool_returning_none_pauses_then_resumes_in_same_invocation():
    CALLS.clear()
    model = ScriptedLlm(responses=[call("request_approval", amount=100), "Approved. Done."])
    runner = InMemoryRunner(
        LlmAgent(name="approver", model=model, tools=[LongRunningFunctionTool(request_approval)])
    )
    sid = await new_session(runner)

    first = await run(runner, sid, user_text("pay 100"))

    assert len(first) == 1 and model.call_count == 1
    fc = first[0]
    call_id = fc.content.parts[0].function_call.id
    assert fc.long_running_tool_ids == {call_id}
    assert fc.is_final_response()
    assert fc.to_wire()["longRunningToolIds"] == [call_id]

    second = await run(
        runner, sid, function_response(call_id, "request_approval", {"status": "approved"})
    )

    assert simplify_all(second) == [("approver", "Approved. Done.")]
    assert second[0].invocation_id == fc.invocation_id
    stored = await stored_events(runner, sid)
    assert stored[2].author == "user" and stored[2].invocation_id == fc.invocation_id
    assert request_summary(model.requests[1].contents) == [
        "user|text:pay 100",
        "model|call:request_approval:None",
        "user|resp:request_approval:None:{'status': 'approved'}",
    ]
    assert CALLS == [100]


async def test_long_running_tool_with_interim_result_then_final_answer():
    CALLS.clear()
    model = ScriptedLlm(responses=[
        call("request_approval_pending", amount=5), "Waiting for approval.", "Approved!",
    ])
    runner = InMemoryRunner(LlmAgent(
        name="approver", model=model, tools=[LongRunningFunctionTool(request_approval_pending)]
    ))
    sid = await new_session(runner)

    first = await run(runner, sid, user_text("pay 5"))
    assert simplify_all(first) == [
        ("approver", ("call", "request_approval_pending", {"amount": 5})),
        ("approver", ("response", "request_approval_pending", {"status": "pending", "ticket": "T-1"})),
        ("approver", "Waiting for approval."),
    ]
    call_id = first[0].content.parts[0].function_call.id

    second = await run(runner, sid, function_response(
        call_id, "request_approval_pending", {"status": "approved"}))

    assert simplify_all(second) == [("approver", "Approved!")]
    assert second[0].invocation_id == first[0].invocation_id
    # The interim answer and interim text are replaced by the final answer in the prompt.
    assert request_summary(model.requests[2].contents) == [
        "user|text:pay 5",
        "model|call:request_approval_pending:None",
        "user|resp:request_approval_pending:None:{'status': 'approved'}",
    ]
    assert CALLS == [5]


def echo(text: str) -> str:
    """Echo."""
    return text


async def test_unknown_tool_gives_the_model_a_readable_error():
    model = ScriptedLlm(responses=[call("nope"), "sorry"])
    runner = InMemoryRunner(LlmAgent(name="root", model=model, tools=[echo]))
    sid = await new_session(runner)

    events = await run(runner, sid, user_text("x"))

    assert simplify_all(events)[1] == ("root", ("response", "nope", {"error": (
        "Invoking `nope()` failed as no tool with that name is available. The tools you can "
        "call are: echo. You could retry, but it is IMPORTANT that you only call a tool from "
        "that list.")}))
    assert simplify_all(events)[2] == ("root", "sorry")


def broken(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"broken with {x}")


async def test_tool_that_raises_persists_an_error_event_then_raises():
    model = ScriptedLlm(responses=[call("broken", x=1)])
    runner = InMemoryRunner(LlmAgent(name="root", model=model, tools=[broken]))
    sid = await new_session(runner)
    seen = []

    with pytest.raises(RuntimeError, match="broken with 1"):
        async for event in runner.run_async(user_id="u", session_id=sid, new_message=user_text("x")):
            seen.append(event)

    assert simplify_all(seen) == [
        ("root", ("call", "broken", {"x": 1})),
        ("root", ("error", "RuntimeError")),
    ]
    stored = await stored_events(runner, sid)
    assert stored[-1].error_code == "RuntimeError"
    assert stored[-1].error_message == "broken with 1"
    assert stored[-1].is_final_response()


async def test_on_tool_error_callback_recovers():
    def recover(tool, args, tool_context, error):
        return {"error": f"{tool.name} failed: {error}"}

    model = ScriptedLlm(responses=[call("broken", x=2), "handled"])
    runner = InMemoryRunner(LlmAgent(
        name="root", model=model, tools=[broken], on_tool_error_callback=recover))
    sid = await new_session(runner)

    events = await run(runner, sid, user_text("x"))

    assert simplify_all(events)[1:] == [
        ("root", ("response", "broken", {"error": "broken failed: broken with 2"})),
        ("root", "handled"),
    ]


async def test_before_agent_callback_content_skips_the_agent():
    def gate(callback_context):
        callback_context.state["gated"] = True
        return types.Content(role="model", parts=[types.Part(text="closed today")])

    model = ScriptedLlm(responses=[])
    runner = InMemoryRunner(LlmAgent(name="root", model=model, before_agent_callback=gate))
    sid = await new_session(runner)

    events = await run(runner, sid, user_text("x"))

    assert simplify_all(events) == [("root", "closed today")]
    assert events[0].actions.state_delta == {"gated": True}
    assert model.call_count == 0


async def test_before_model_callback_response_replaces_the_model_call():
    async def cached(callback_context, llm_request):
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text="cached")]))

    model = ScriptedLlm(responses=[])
    runner = InMemoryRunner(LlmAgent(
        name="root", model=model, before_model_callback=cached,
        generate_content_config=types.GenerateContentConfig(temperature=0.1),
    ))
    sid = await new_session(runner)

    events = await run(runner, sid, user_text("x"), run_config=RunConfig(max_llm_calls=1))

    assert simplify_all(events) == [("root", "cached")]
    assert model.call_count == 0


async def test_after_model_callback_replaces_the_response_and_callbacks_bind_positionally():
    def shout(ctx, response):  # parameter names differ from ADK's: bound by position
        text = response.content.parts[0].text
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text.upper())]))

    runner = InMemoryRunner(LlmAgent(
        name="root", model=ScriptedLlm(responses=["quiet"]), after_model_callback=[shout]))
    sid = await new_session(runner)

    assert simplify_all(await run(runner, sid, user_text("x"))) == [("root", "QUIET")]


async def test_before_tool_dict_skips_the_tool_and_after_tool_still_sees_it():
    seen = []

    def skip(tool, args, tool_context):
        return {"skipped": tool.name}

    def after(tool, args, tool_context, tool_response):
        seen.append(tool_response)
        return None

    model = ScriptedLlm(responses=[call("broken", x=1), "ok"])
    runner = InMemoryRunner(LlmAgent(
        name="root", model=model, tools=[broken],
        before_tool_callback=skip, after_tool_callback=after))
    sid = await new_session(runner)

    events = await run(runner, sid, user_text("x"))

    assert simplify_all(events)[1] == ("root", ("response", "broken", {"skipped": "broken"}))
    assert seen == [{"skipped": "broken"}]


async def test_sse_partials_share_the_final_event_id_and_are_not_persisted():
    model = ScriptedLlm(responses=[Chunks(["Hel", "lo", "Hello"])])
    runner = InMemoryRunner(LlmAgent(name="root", model=model))
    sid = await new_session(runner)

    events = await run(
        runner, sid, user_text("x"), run_config=RunConfig(streaming_mode=StreamingMode.SSE))

    assert [(e.content.parts[0].text, e.partial) for e in events] == [
        ("Hel", True), ("lo", True), ("Hello", None)]
    assert len({e.id for e in events}) == 1
    stored = await stored_events(runner, sid)
    assert [e.content.parts[0].text for e in stored] == ["x", "Hello"]


async def test_max_llm_calls_stops_a_model_that_keeps_calling_tools():
    model = ScriptedLlm(responses=[call("echo", text="a"), call("echo", text="b"), call("echo", text="c")])
    runner = InMemoryRunner(LlmAgent(name="root", model=model, tools=[echo]))
    sid = await new_session(runner)
    seen = []

    with pytest.raises(LlmCallsLimitExceededError):
        async for event in runner.run_async(
            user_id="u", session_id=sid, new_message=user_text("x"),
            run_config=RunConfig(max_llm_calls=2),
        ):
            seen.append(event)

    assert [a for a, _ in simplify_all(seen)] == ["root"] * 5
    assert seen[-1].error_code == "LlmCallsLimitExceededError"
    assert model.call_count == 2
    stored = await stored_events(runner, sid)
    assert stored[-1].error_code == "LlmCallsLimitExceededError"


async def test_sync_tools_do_not_block_the_event_loop():
    import threading

    released = threading.Event()

    def blocking_tool() -> str:
        """Blocks until the event loop releases it."""
        assert released.wait(5), "the event loop was blocked by a sync tool"
        return "released"

    async def releaser() -> str:
        """Runs on the loop while blocking_tool waits."""
        await asyncio.sleep(0)
        released.set()
        return "set"

    model = ScriptedLlm(responses=[[call("blocking_tool"), call("releaser")], "ok"])
    runner = InMemoryRunner(LlmAgent(name="root", model=model, tools=[blocking_tool, releaser]))
    sid = await new_session(runner)

    events = await run(runner, sid, user_text("x"))

    assert simplify_all(events)[1] == ("root", [
        ("response", "blocking_tool", {"result": "released"}),
        ("response", "releaser", {"result": "set"}),
    ])


async def test_output_key_keeps_the_text_said_beside_a_call():
    # google-adk 2.13: every text of the agent's turn goes into output_key, not the last only.
    thinking_then_call = [types.Part(text="thinking "), call("get_weather", city="Oslo")]
    model = ScriptedLlm(responses=[thinking_then_call, "final"])
    runner = InMemoryRunner(
        LlmAgent(name="root", model=model, tools=[get_weather], output_key="answer"))
    sid = await new_session(runner)

    fc, _, text = await run(runner, sid, user_text("weather?"))

    assert fc.actions.state_delta == {"answer": "thinking "}
    assert text.actions.state_delta == {"answer": "thinking final"}
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u",
                                                      session_id=sid)
    assert session.state["answer"] == "thinking final"
