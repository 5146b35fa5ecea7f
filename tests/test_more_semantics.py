"""Smaller contract points: artifact templating, toolsets per step, self-requested confirmation,
transfer into a workflow agent, per-tool routing, duplicate results."""

from __future__ import annotations

from google.genai import types

from orchestrator import (
    App,
    BaseTool,
    BaseToolset,
    FunctionTool,
    InMemoryRunner,
    LlmAgent,
    SequentialAgent,
    ToolContext,
)
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus, ToolResult
from orchestrator.distributed.registry import AppRegistry
from orchestrator.models.fake import ScriptedLlm
from tests.support.events import call, simplify_all, user_text


async def _run(runner, text="go", sid=None):
    if sid is None:
        sid = (await runner.session_service.create_session(app_name=runner.app_name, user_id="u")).id
    events = [e async for e in runner.run_async(user_id="u", session_id=sid, new_message=user_text(text))]
    return events, sid


async def test_instruction_reads_an_artifact_by_name():
    model = ScriptedLlm(responses=["ok"])
    runner = InMemoryRunner(LlmAgent(name="a", model=model, instruction="Policy: {artifact.policy.txt} [{artifact.none?}]"))
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    await runner.artifact_service.save_artifact(app_name=runner.app_name, user_id="u", session_id=session.id,
                                                filename="policy.txt", artifact=types.Part(text="be kind"))
    await _run(runner, sid=session.id)
    assert model.requests[0].config.system_instruction.startswith("Policy: be kind []")


class GrowingToolset(BaseToolset):
    """Offers one more tool each time it is listed."""

    def __init__(self, *, per_step: bool = False) -> None:
        super().__init__()
        self.calls = 0
        self._use_invocation_cache = not per_step

    async def get_tools(self, readonly_context=None) -> list[BaseTool]:
        self.calls += 1
        tools = []
        for i in range(self.calls):
            def tool(i: int = i) -> int:
                """Numbered tool."""
                return i
            tool.__name__ = f"tool_{i}"
            tools.append(FunctionTool(tool))
        return tools


def _declared(model):
    return [[d.name for d in r.config.tools[0].function_declarations] for r in model.requests]


async def test_a_toolset_is_listed_once_per_invocation_as_in_google_adk():
    toolset = GrowingToolset()
    model = ScriptedLlm(responses=[call("tool_0"), "done", "again"])
    runner = InMemoryRunner(LlmAgent(name="a", model=model, tools=[toolset]))
    _, sid = await _run(runner)
    await _run(runner, "more", sid)
    assert _declared(model) == [["tool_0"], ["tool_0"], ["tool_0", "tool_1"]]


async def test_a_toolset_without_the_invocation_cache_is_listed_on_every_step():
    toolset = GrowingToolset(per_step=True)
    model = ScriptedLlm(responses=[call("tool_0"), "done"])
    await _run(InMemoryRunner(LlmAgent(name="a", model=model, tools=[toolset])))
    assert _declared(model) == [["tool_0"], ["tool_0", "tool_1"]]


async def test_a_tool_can_ask_for_confirmation_itself():
    def wire(amount: int, tool_context: ToolContext) -> dict:
        """Wire money; large amounts need a human."""
        confirmation = tool_context.tool_confirmation
        if amount > 100 and confirmation is None:
            tool_context.request_confirmation(hint="large amount")
            return {"error": "needs approval"}
        return {"sent": amount, "approved": bool(confirmation and confirmation.confirmed)}

    model = ScriptedLlm(responses=[call("wire", amount=500), "waiting for approval", "sent!"])
    runner = InMemoryRunner(LlmAgent(name="bank", model=model, tools=[wire]))
    first, sid = await _run(runner)
    # No skip_summarization here: the model is called after the error answer.
    assert [a for a, _ in simplify_all(first)] == ["bank"] * 4
    request = next(e for e in first if e.get_function_calls() and e.get_function_calls()[0].name == "adk_request_confirmation")
    assert request.long_running_tool_ids
    assert request.get_function_calls()[0].args["toolConfirmation"]["hint"] == "large amount"
    answer = types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id=request.get_function_calls()[0].id, name="adk_request_confirmation", response={"confirmed": True}))])
    second = [e async for e in runner.run_async(user_id="u", session_id=sid, new_message=answer)]
    assert simplify_all(second) == [
        ("bank", ("response", "wire", {"sent": 500, "approved": True})),
        ("bank", "sent!"),
    ]


async def test_after_a_transfer_into_a_sequential_agent_the_next_turn_returns_to_root():
    steps = SequentialAgent(name="steps", sub_agents=[
        LlmAgent(name="s1", model=ScriptedLlm(responses=["one"])),
        LlmAgent(name="s2", model=ScriptedLlm(responses=["two"])),
    ])
    root = LlmAgent(name="root", model=ScriptedLlm(responses=[call("transfer_to_agent", agent_name="steps"), "root again"]),
                    sub_agents=[steps])
    runner = InMemoryRunner(root)
    first, sid = await _run(runner)
    assert [a for a, _ in simplify_all(first)] == ["root", "root", "s1", "s2"]
    second, _ = await _run(runner, "more", sid)
    assert simplify_all(second) == [("root", "root again")]


def echo(text: str) -> str:
    """Echo (a plain tool, routed to a worker queue by configuration)."""
    return text


async def test_a_plain_tool_routed_to_a_queue_runs_remotely_and_pauses_the_turn():
    model = ScriptedLlm(responses=[call("echo", text="hi"), "echoed"])
    rt = EmbeddedRuntime(AppRegistry([App(name="app", root_agent=LlmAgent(name="a", model=model, tools=[echo]))]),
                         tool_queues={"echo": "special"})
    inv = await rt.enqueue(app_name="app", user_id="u", new_message="go")
    record = await rt.wait("app", inv, timeout=5, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await rt.events("app", inv)
    assert events[1].long_running_tool_ids == {events[1].get_function_calls()[0].id}
    assert simplify_all(events)[2:] == [("a", ("response", "echo", {"result": "hi"})), ("a", "echoed")]


async def test_a_second_copy_of_a_result_is_ignored():
    rt = EmbeddedRuntime(AppRegistry([App(name="app", root_agent=LlmAgent(name="a", model=ScriptedLlm(responses=[])))]))
    from orchestrator.distributed.models import InvocationRecord

    record = InvocationRecord(invocation_id="e-1", app_name="app", user_id="u", session_id="s", pending_calls=["c1"])
    await rt.store.create(record)
    result = ToolResult(function_call_id="c1", tool_name="t", response={"v": 1})
    assert await rt.service.deliver("app", "e-1", result) is not None
    assert await rt.service.deliver("app", "e-1", result.model_copy(update={"response": {"v": 2}})) is None
    assert (await rt.store.results("app", "e-1"))["c1"].response == {"v": 1}
