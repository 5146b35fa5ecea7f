"""SequentialAgent, ParallelAgent, LoopAgent, custom agents (adk-reference §6.8-6.10, §11 10-12)."""

from __future__ import annotations

import asyncio

import pytest
from google.genai import types

from orchestrator import (
    BaseAgent,
    Event,
    InMemoryRunner,
    LlmAgent,
    LongRunningFunctionTool,
    LoopAgent,
    ParallelAgent,
    SequentialAgent,
    exit_loop,
)
from orchestrator.models.fake import FunctionLlm, ScriptedLlm
from tests.support.events import call, function_response, request_summary, simplify_all, user_text


async def run_turn(runner, text="go", session_id=None):
    if session_id is None:
        session_id = (await runner.session_service.create_session(app_name=runner.app_name, user_id="u")).id
    events = [e async for e in runner.run_async(user_id="u", session_id=session_id, new_message=user_text(text))]
    return events, session_id


async def test_sequential_output_key_feeds_templated_instruction_and_context_rewrite():
    writer_model = ScriptedLlm(responses=["draft text"])
    reviewer_model = ScriptedLlm(responses=["looks good"])
    pipeline = SequentialAgent(name="pipeline", sub_agents=[
        LlmAgent(name="writer", model=writer_model, output_key="draft"),
        LlmAgent(name="reviewer", model=reviewer_model, instruction="Review: {draft}"),
    ])
    events, _ = await run_turn(InMemoryRunner(pipeline))

    assert simplify_all(events) == [("writer", "draft text"), ("reviewer", "looks good")]
    assert [e.branch for e in events] == [None, None]
    assert reviewer_model.requests[0].config.system_instruction.startswith("Review: draft text")
    history = request_summary(reviewer_model.requests[0].contents)
    assert history[0] == "user|text:go"
    assert "[writer] said:" in history[1] and history[1].startswith("user|text:For context:")


async def test_sequential_stops_after_a_sub_agent_that_paused_even_when_not_resumable():
    def ask(question: str):
        """Ask a human."""
        return None

    second = ScriptedLlm(responses=["never"])
    pipeline = SequentialAgent(name="pipeline", sub_agents=[
        LlmAgent(name="s1", model=ScriptedLlm(responses=[call("ask", question="ok?"), "thanks"]),
                 tools=[LongRunningFunctionTool(ask)]),
        LlmAgent(name="s2", model=second),
    ])
    runner = InMemoryRunner(pipeline)
    events, sid = await run_turn(runner)
    assert [a for a, _ in simplify_all(events)] == ["s1"]
    assert events[0].long_running_tool_ids
    call_id = events[0].content.parts[0].function_call.id

    follow = [e async for e in runner.run_async(
        user_id="u", session_id=sid, new_message=function_response(call_id, "ask", {"answer": "yes"}))]
    assert simplify_all(follow) == [("s1", "thanks")]  # routed to s1 only: s2 never runs
    assert second.call_count == 0


def _delayed_model(name: str, release: asyncio.Event | None, wait_for: asyncio.Event | None):
    async def answer(request):
        if wait_for is not None:
            await asyncio.wait_for(wait_for.wait(), 5)
        if release is not None:
            release.set()
        seen = len(request.contents)
        return f"from {name} (saw {seen})"
    return FunctionLlm(fn=answer)


async def test_parallel_branches_interleave_by_arrival_and_isolate_history():
    a_done = asyncio.Event()
    par = ParallelAgent(name="par", sub_agents=[
        LlmAgent(name="a", model=_delayed_model("a", release=a_done, wait_for=None)),
        LlmAgent(name="b", model=_delayed_model("b", release=None, wait_for=a_done)),
    ])
    after_model = ScriptedLlm(responses=["summary"])
    root = SequentialAgent(name="root", sub_agents=[par, LlmAgent(name="after", model=after_model)])
    events, _ = await run_turn(InMemoryRunner(root))

    assert simplify_all(events) == [
        ("a", "from a (saw 1)"), ("b", "from b (saw 1)"), ("after", "summary"),
    ]
    assert [e.branch for e in events] == ["par.a", "par.b", None]
    downstream = request_summary(after_model.requests[0].contents)
    assert any("from a" in s for s in downstream) and any("from b" in s for s in downstream)


async def test_parallel_branch_waits_for_commit_before_producing_its_next_event():
    committed_before_next: list[bool] = []

    class Chatty(BaseAgent):
        async def _run_async_impl(self, ctx):
            first = Event(invocation_id=ctx.invocation_id, author=self.name, branch=ctx.branch,
                          content=types.Content(role="model", parts=[types.Part(text="1")]))
            yield first
            committed_before_next.append(any(e.id == first.id for e in ctx.session.events))
            yield Event(invocation_id=ctx.invocation_id, author=self.name, branch=ctx.branch,
                        content=types.Content(role="model", parts=[types.Part(text="2")]))

    par = ParallelAgent(name="par", sub_agents=[Chatty(name="x"), Chatty(name="y")])
    events, _ = await run_turn(InMemoryRunner(par))
    assert len(events) == 4
    assert committed_before_next == [True, True]


async def test_parallel_branch_error_cancels_siblings_and_propagates():
    cancelled = asyncio.Event()

    async def hang(request):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def fail(request):
        raise RuntimeError("branch exploded")

    par = ParallelAgent(name="par", sub_agents=[
        LlmAgent(name="slow", model=FunctionLlm(fn=hang)),
        LlmAgent(name="bad", model=FunctionLlm(fn=fail)),
    ])
    with pytest.raises(RuntimeError, match="branch exploded"):
        await run_turn(InMemoryRunner(par))
    assert cancelled.is_set()


async def test_loop_until_exit_loop_and_max_iterations():
    model = ScriptedLlm(responses=["iter1", "iter2", call("exit_loop")])
    loop = LoopAgent(name="loop", sub_agents=[LlmAgent(name="worker", model=model, tools=[exit_loop])])
    events, _ = await run_turn(InMemoryRunner(loop))
    assert simplify_all(events) == [
        ("worker", "iter1"), ("worker", "iter2"),
        ("worker", ("call", "exit_loop", {})),
        ("worker", ("response", "exit_loop", {"result": None})),
    ]
    assert events[-1].actions.escalate and events[-1].actions.skip_summarization
    assert model.call_count == 3

    bounded = LoopAgent(name="loop", max_iterations=2, sub_agents=[
        LlmAgent(name="worker", model=ScriptedLlm(responses=["a", "b", "c"]))])
    events, _ = await run_turn(InMemoryRunner(bounded))
    assert simplify_all(events) == [("worker", "a"), ("worker", "b")]
    zero = LoopAgent(name="loop", max_iterations=0, sub_agents=[LlmAgent(name="w", model=ScriptedLlm())])
    assert (await run_turn(InMemoryRunner(zero)))[0] == []


async def test_agent_callbacks_apply_to_workflow_agents():
    def skip(callback_context):
        return types.Content(role="model", parts=[types.Part(text="skipped seq")])

    def after(callback_context):
        return types.Content(role="model", parts=[types.Part(text="after par")])

    model = ScriptedLlm(responses=["inner"])
    par = ParallelAgent(name="par", after_agent_callback=after,
                        sub_agents=[LlmAgent(name="w", model=model)])
    events, _ = await run_turn(InMemoryRunner(par))
    assert simplify_all(events) == [("w", "inner"), ("par", "after par")]
    seq = SequentialAgent(name="seq", before_agent_callback=skip,
                          sub_agents=[LlmAgent(name="w", model=ScriptedLlm())])
    events, _ = await run_turn(InMemoryRunner(seq))
    assert simplify_all(events) == [("seq", "skipped seq")]
