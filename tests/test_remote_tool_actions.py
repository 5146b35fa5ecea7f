"""A tool's actions reach the invocation when the tool runs remotely, as in process.

``skip_summarization`` ends the agent's turn on the tool's answer, ``transfer_to_agent``
hands the turn over, and ``escalate`` ends a LoopAgent: google-adk does each in process. Remote answers used to
carry only the state and artifact deltas: the model summarised anyway, nobody was
transferred to, the loop ran on. The embedded runtime runs remote calls through the
same job and resume code as workers and orchestrators.
"""

from __future__ import annotations

from typing import Any

from orchestrator import App, LlmAgent, LoopAgent, ResumabilityConfig, ToolContext
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.models.fake import ScriptedLlm
from tests.support.action_tools import remote, skip_tool, stop_tool, to_helper
from tests.support.events import call, simplify_all


def pay_tool(amount: int, tool_context: ToolContext) -> dict[str, Any]:
    if not tool_context.tool_confirmation:
        tool_context.request_confirmation(hint=f"pay {amount}?")
        return {"status": "needs confirmation"}
    return {"paid": amount}


async def _run(app: App, text: str = "go") -> tuple[EmbeddedRuntime, str]:
    rt = EmbeddedRuntime(AppRegistry([app]))
    inv = await rt.enqueue(app_name=app.name, user_id="u", new_message=text)
    await rt.wait(app.name, inv, timeout=5, until=InvocationStatus.FINISHED)
    return rt, inv


async def test_skip_summarization_from_a_remote_tool_ends_the_turn_on_its_answer():
    model = ScriptedLlm(responses=[call("skip_tool"), "SUMMARY"])
    app = App(name="skip", root_agent=LlmAgent(name="root", model=model,
                                               tools=[remote(skip_tool)]))
    rt, inv = await _run(app)
    assert (await rt.status("skip", inv)).status is InvocationStatus.COMPLETED
    events = await rt.events("skip", inv)
    assert simplify_all(events)[-1] == ("root", ("response", "skip_tool", {"raw": 1}))
    assert events[-1].actions.skip_summarization and events[-1].is_final_response()


async def test_transfer_from_a_remote_tool_hands_the_turn_to_its_target():
    helper = LlmAgent(name="helper", model=ScriptedLlm(responses=["helper here"]))
    root = LlmAgent(name="root", model=ScriptedLlm(responses=[call("to_helper"), "root again"]),
                    tools=[remote(to_helper)], sub_agents=[helper])
    rt, inv = await _run(App(name="transfer", root_agent=root))
    assert simplify_all(await rt.events("transfer", inv))[-2:] == [
        ("root", ("response", "to_helper", {"routed": True})), ("helper", "helper here")]


async def test_escalate_from_a_remote_tool_ends_a_resumable_loop():
    worker = LlmAgent(name="worker", model=ScriptedLlm(responses=[
        call("stop_tool"), "iteration done", call("stop_tool"), "iteration done"]),
        tools=[remote(stop_tool)])
    app = App(name="loop", root_agent=LoopAgent(name="loop", sub_agents=[worker], max_iterations=2),
              resumability_config=ResumabilityConfig(is_resumable=True))
    rt, inv = await _run(app)
    assert (await rt.status("loop", inv)).status is InvocationStatus.COMPLETED
    texts = [payload for _, payload in simplify_all(await rt.events("loop", inv))
             if payload == "iteration done"]
    assert texts == ["iteration done"]  # one iteration, as in process


async def test_a_confirmation_asked_from_inside_a_remote_tool_is_an_error_naming_the_way():
    # Its answer would be provisional and a job's first result final: the confirmed run
    # could never answer. The model reads why, rather than the tool's provisional answer.
    model = ScriptedLlm(responses=[call("pay_tool", amount=5), "could not pay"])
    app = App(name="confirm", root_agent=LlmAgent(name="root", model=model,
                                                  tools=[remote(pay_tool)]))
    rt, inv = await _run(app)
    assert (await rt.status("confirm", inv)).status is InvocationStatus.COMPLETED
    [answer] = [r.response for e in await rt.events("confirm", inv)
                for r in e.get_function_responses()]
    assert "give it require_confirmation instead" in answer["error"]
