"""AgentTool, tool confirmation and resumable invocations (adk-reference §6.11, §7.6, §8, §11 13-17)."""

from __future__ import annotations

import pytest
from google.genai import types

from orchestrator import (
    AgentTool,
    App,
    BaseAgent,
    BaseAgentState,
    Event,
    FunctionTool,
    InMemoryRunner,
    LlmAgent,
    LongRunningFunctionTool,
    ParallelAgent,
    ResumabilityConfig,
    SequentialAgent,
    ToolContext,
)
from orchestrator.models.fake import ScriptedLlm
from tests.support.events import call, function_response, simplify_all, user_text

RESUMABLE = ResumabilityConfig(is_resumable=True)


def resumable_runner(root) -> InMemoryRunner:
    return InMemoryRunner(app=App(name="app", root_agent=root, resumability_config=RESUMABLE))


async def start(runner, text="go"):
    sid = (await runner.session_service.create_session(app_name=runner.app_name, user_id="u")).id
    events = [e async for e in runner.run_async(user_id="u", session_id=sid, new_message=user_text(text))]
    return events, sid


async def follow(runner, sid, message=None, invocation_id=None):
    return [e async for e in runner.run_async(
        user_id="u", session_id=sid, new_message=message, invocation_id=invocation_id)]


def shape(events):
    out = []
    for author, payload in simplify_all(events):
        if isinstance(payload, tuple) and payload[0] == "actions":
            payload = ("state", payload[1])
        out.append((author, payload))
    return out


async def test_agent_tool_runs_child_in_its_own_session_and_forwards_state():
    def remember(tool_context: ToolContext) -> str:
        """Remember."""
        tool_context.state["child_note"] = "noted"
        return "ok"

    child_model = ScriptedLlm(responses=[call("remember"), "child final"])
    child = LlmAgent(name="helper", description="Helps.", model=child_model, tools=[remember])
    root_model = ScriptedLlm(responses=[call("helper", request="please"), "root done"])
    runner = InMemoryRunner(LlmAgent(name="root", model=root_model, tools=[AgentTool(child)]))
    events, sid = await start(runner)

    assert shape(events) == [
        ("root", ("call", "helper", {"request": "please"})),
        ("root", ("response", "helper", {"result": "child final"})),
        ("root", "root done"),
    ]
    assert events[1].actions.state_delta == {"child_note": "noted"}
    assert child_model.requests[0].contents[0].parts[0].text == "please"
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=sid)
    assert session.state["child_note"] == "noted"
    assert {e.author for e in session.events} == {"user", "root"}  # the child session is discarded


async def test_agent_tool_skip_summarization_ends_the_turn():
    child = LlmAgent(name="helper", model=ScriptedLlm(responses=["child final"]))
    root_model = ScriptedLlm(responses=[call("helper", request="x")])
    runner = InMemoryRunner(LlmAgent(name="root", model=root_model,
                                     tools=[AgentTool(child, skip_summarization=True)]))
    events, _ = await start(runner)
    assert events[-1].is_final_response() and root_model.call_count == 1
    # The model writes nothing after it: the answer is also there as text (as google-adk).
    [response, shown] = events[-1].content.parts
    assert response.function_response.response == {"result": "child final"}
    assert shown.text == "child final"


def transfer_money(amount: int, tool_context: ToolContext) -> dict:
    """Transfer money."""
    TRANSFERS.append((amount, tool_context.tool_confirmation.confirmed if tool_context.tool_confirmation else None))
    return {"sent": amount}


TRANSFERS: list = []


@pytest.mark.parametrize("confirmed", [True, False])
async def test_tool_confirmation_request_and_answer(confirmed):
    TRANSFERS.clear()
    model = ScriptedLlm(responses=[call("transfer_money", amount=10), "finished"])
    runner = InMemoryRunner(LlmAgent(name="bank", model=model, tools=[
        FunctionTool(transfer_money, require_confirmation=True)]))
    events, sid = await start(runner)

    assert [e.author for e in events] == ["bank"] * 3
    fc, request, gate = events
    original_id = fc.content.parts[0].function_call.id
    req_call = request.content.parts[0].function_call
    assert req_call.name == "adk_request_confirmation"
    assert request.long_running_tool_ids == {req_call.id} and request.is_final_response()
    assert req_call.args["originalFunctionCall"]["id"] == original_id
    assert req_call.args["toolConfirmation"]["confirmed"] is False
    assert gate.content.parts[0].function_response.response == {
        "error": "This tool call requires confirmation, please approve or reject."}
    assert gate.actions.skip_summarization
    assert original_id in gate.actions.requested_tool_confirmations
    assert model.call_count == 1 and TRANSFERS == []

    answer = function_response(req_call.id, "adk_request_confirmation", {"confirmed": confirmed})
    second = await follow(runner, sid, answer)

    expected = {"sent": 10} if confirmed else {"error": "This tool call is rejected."}
    assert shape(second) == [
        ("bank", ("response", "transfer_money", expected)),
        ("bank", "finished"),
    ]
    assert second[0].content.parts[0].function_response.id == original_id
    assert {e.invocation_id for e in second} == {fc.invocation_id}
    assert TRANSFERS == ([(10, True)] if confirmed else [])
    # Confirmation traffic is hidden from the model.
    names = [p.function_call.name if p.function_call else p.function_response.name
             for c in model.requests[1].contents for p in c.parts if p.function_call or p.function_response]
    assert "adk_request_confirmation" not in names


def ask(question: str):
    """Ask a human."""
    return None


async def test_resumable_sequential_with_long_running_call():
    s2_model = ScriptedLlm(responses=["s2 text"])
    seq = SequentialAgent(name="seq", sub_agents=[
        LlmAgent(name="s1", model=ScriptedLlm(responses=[call("ask", question="?"), "s1 text"]),
                 tools=[LongRunningFunctionTool(ask)]),
        LlmAgent(name="s2", model=s2_model),
    ])
    runner = resumable_runner(seq)
    first, sid = await start(runner)
    assert shape(first) == [
        ("seq", ("state", {"agent_state": {"current_sub_agent": "s1"}})),
        ("s1", ("call", "ask", {"question": "?"})),
    ]
    call_id = first[1].content.parts[0].function_call.id

    second = await follow(runner, sid, function_response(call_id, "ask", {"a": "yes"}))

    assert shape(second) == [
        ("s1", "s1 text"),
        ("s1", ("state", {"end_of_agent": True})),
        ("seq", ("state", {"agent_state": {"current_sub_agent": "s2"}})),
        ("s2", "s2 text"),
        ("s2", ("state", {"end_of_agent": True})),
        ("seq", ("state", {"end_of_agent": True})),
    ]
    assert {e.invocation_id for e in first + second} == {first[0].invocation_id}
    # Running the finished invocation again does nothing.
    assert await follow(runner, sid, invocation_id=first[0].invocation_id) == []


async def test_resume_after_crash_replays_only_the_unanswered_call():
    runs = {"a": 0, "b": 0}

    def tool_a() -> str:
        """A."""
        runs["a"] += 1
        return "a done"

    def tool_b() -> str:
        """B."""
        runs["b"] += 1
        return "b done"

    model = ScriptedLlm(responses=[call("tool_a"), call("tool_b"), "all done"])
    runner = resumable_runner(LlmAgent(name="root", model=model, tools=[tool_a, tool_b]))
    sid = (await runner.session_service.create_session(app_name="app", user_id="u")).id

    class Crash(Exception):
        pass

    seen: list[Event] = []
    with pytest.raises(Crash):
        async for event in runner.run_async(user_id="u", session_id=sid, new_message=user_text("go")):
            seen.append(event)
            calls = event.get_function_calls()
            if calls and calls[0].name == "tool_b":
                raise Crash  # the process "dies" after tool_b's call was committed
    assert runs == {"a": 1, "b": 0}

    resumed = await follow(runner, sid, invocation_id=seen[0].invocation_id)

    assert shape(resumed) == [
        ("root", ("response", "tool_b", {"result": "b done"})),
        ("root", "all done"),
        ("root", ("state", {"end_of_agent": True})),
    ]
    assert runs == {"a": 1, "b": 1}
    assert resumed[0].content.parts[0].function_response.id == seen[-1].content.parts[0].function_call.id


async def test_resumable_parallel_runs_only_unfinished_branches():
    fast_model = ScriptedLlm(responses=["fast done"])
    waiting_model = ScriptedLlm(responses=[call("ask", question="?"), "waited"])
    par = ParallelAgent(name="par", sub_agents=[
        LlmAgent(name="fast", model=fast_model),
        LlmAgent(name="waiting", model=waiting_model, tools=[LongRunningFunctionTool(ask)]),
    ])
    runner = resumable_runner(par)
    first, sid = await start(runner)
    authors = [a for a, _ in shape(first)]
    assert authors[0] == "par" and "fast" in authors and "waiting" in authors
    assert not any(e.author == "par" and e.actions.end_of_agent for e in first)
    call_id = next(e for e in first if e.get_function_calls()).content.parts[0].function_call.id

    second = await follow(runner, sid, function_response(call_id, "ask", {"a": 1}))

    assert shape(second) == [
        ("waiting", "waited"),
        ("waiting", ("state", {"end_of_agent": True})),
        ("par", ("state", {"end_of_agent": True})),
    ]
    assert second[0].branch == "par.waiting"
    assert fast_model.call_count == 1


async def test_resumable_parallel_escalation_cancels_the_rest():
    import asyncio

    def escalate(tool_context: ToolContext) -> str:
        """Escalate."""
        tool_context.actions.escalate = True
        return "stop"

    async def never(request):
        await asyncio.sleep(30)

    from orchestrator.models.fake import FunctionLlm
    par = ParallelAgent(name="root", sub_agents=[
        LlmAgent(name="escalating", model=ScriptedLlm(responses=[call("escalate"), "x"]), tools=[escalate]),
        LlmAgent(name="slow", model=FunctionLlm(fn=never)),
    ])
    runner = resumable_runner(par)
    events, sid = await start(runner)
    assert [a for a, _ in shape(events)] == ["root", "escalating", "escalating", "root"]
    assert events[-1].actions.end_of_agent
    assert await follow(runner, sid, invocation_id=events[0].invocation_id) == []


class CounterState(BaseAgentState):
    step: int = 0


class Counter(BaseAgent):
    """A custom agent that checkpoints its own progress and can crash once."""

    crash_at: int = -1

    async def _run_async_impl(self, ctx):
        state = self._load_agent_state(ctx, CounterState) or CounterState()
        for step in range(state.step, 3):
            if step == self.crash_at:
                self.crash_at = -1
                raise RuntimeError("crash")
            yield Event(invocation_id=ctx.invocation_id, author=self.name,
                        content=types.Content(role="model", parts=[types.Part(text=f"step {step}")]))
            ctx.set_agent_state(self.name, agent_state=CounterState(step=step + 1).model_dump())
            yield self._create_agent_state_event(ctx)
        ctx.set_agent_state(self.name, end_of_agent=True)
        yield self._create_agent_state_event(ctx)


async def test_custom_agent_resumes_from_its_own_checkpoint():
    agent = Counter(name="counter", crash_at=2)
    runner = resumable_runner(agent)
    sid = (await runner.session_service.create_session(app_name="app", user_id="u")).id
    seen = []
    with pytest.raises(RuntimeError):
        async for e in runner.run_async(user_id="u", session_id=sid, new_message=user_text("go")):
            seen.append(e)
    resumed = await follow(runner, sid, invocation_id=seen[0].invocation_id)
    assert [t for _, t in shape(resumed)] == ["step 2", ("state", {"agent_state": {"step": 3}}),
                                              ("state", {"end_of_agent": True})]


async def test_resume_refuses_a_changed_agent_tree_and_unknown_invocations():
    seq = SequentialAgent(name="seq", sub_agents=[
        LlmAgent(name="s1", model=ScriptedLlm(responses=[call("ask", question="?")]),
                 tools=[LongRunningFunctionTool(ask)])])
    runner = resumable_runner(seq)
    first, sid = await start(runner)
    other = resumable_runner(SequentialAgent(name="seq", sub_agents=[
        LlmAgent(name="renamed", model=ScriptedLlm())]))
    other.session_service = runner.session_service
    with pytest.raises(ValueError, match="not in the current agent tree"):
        await follow(other, sid, invocation_id=first[0].invocation_id)
    with pytest.raises(ValueError, match="not found"):
        await follow(runner, sid, invocation_id="e-unknown")


async def test_non_resumable_app_refuses_resume_without_answers():
    runner = InMemoryRunner(LlmAgent(name="root", model=ScriptedLlm(responses=["hi"])))
    events, sid = await start(runner)
    with pytest.raises(ValueError, match="not resumable"):
        await follow(runner, sid, invocation_id=events[0].invocation_id)
