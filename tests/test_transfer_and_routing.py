"""transfer_to_agent, its targets, and routing of the next turn (adk-reference §3.6, §6.7)."""

from __future__ import annotations

import pytest

from orchestrator import InMemoryRunner, LlmAgent
from orchestrator.models.fake import ScriptedLlm
from tests.support.events import call, simplify_all, user_text


def build(sub_disallow_parent: bool = False):
    root_model = ScriptedLlm(responses=[call("transfer_to_agent", agent_name="billing"), "root again"])
    billing_model = ScriptedLlm(responses=["billing 1", "billing 2"])
    billing = LlmAgent(name="billing", description="Handles bills.", model=billing_model,
                       disallow_transfer_to_parent=sub_disallow_parent)
    support = LlmAgent(name="support", description="Fixes things.", model=ScriptedLlm(responses=[]))
    root = LlmAgent(name="root", model=root_model, sub_agents=[billing, support])
    return InMemoryRunner(root), root_model, billing_model


async def turn(runner, sid, text):
    return [e async for e in runner.run_async(user_id="u", session_id=sid, new_message=user_text(text))]


async def test_transfer_runs_the_target_in_the_same_invocation_and_next_turn_stays_there():
    runner, root_model, billing_model = build()
    sid = (await runner.session_service.create_session(app_name=runner.app_name, user_id="u")).id

    first = await turn(runner, sid, "my bill")

    assert simplify_all(first) == [
        ("root", ("call", "transfer_to_agent", {"agent_name": "billing"})),
        ("root", ("response", "transfer_to_agent", {"result": None})),
        ("billing", "billing 1"),
    ]
    assert first[1].actions.transfer_to_agent == "billing"
    assert len({e.invocation_id for e in first}) == 1
    declared = root_model.requests[0].config.tools[0].function_declarations
    transfer = next(d for d in declared if d.name == "transfer_to_agent")
    assert transfer.parameters_json_schema["properties"]["agent_name"]["enum"] == ["billing", "support"]
    billing_prompt = billing_model.requests[0].config.system_instruction
    assert "root" in billing_prompt and "support" in billing_prompt  # parent and peer targets

    second = await turn(runner, sid, "and again")
    assert simplify_all(second) == [("billing", "billing 2")]


async def test_disallow_transfer_to_parent_sends_the_next_turn_back_to_root():
    runner, _, billing_model = build(sub_disallow_parent=True)
    sid = (await runner.session_service.create_session(app_name=runner.app_name, user_id="u")).id
    await turn(runner, sid, "my bill")
    assert "root" not in billing_model.requests[0].config.system_instruction.split("agents:")[-1]

    second = await turn(runner, sid, "and again")
    assert simplify_all(second) == [("root", "root again")]


async def test_transfer_to_an_undeclared_agent_fails_clearly():
    model = ScriptedLlm(responses=[call("transfer_to_agent", agent_name="ghost")])
    runner = InMemoryRunner(LlmAgent(name="root", model=model, sub_agents=[
        LlmAgent(name="real", model=ScriptedLlm(responses=[]))]))
    sid = (await runner.session_service.create_session(app_name=runner.app_name, user_id="u")).id
    with pytest.raises(ValueError, match="Agent root is not allowed to transfer to agent ghost."):
        await turn(runner, sid, "x")


async def test_single_flow_agent_gets_no_transfer_tool():
    model = ScriptedLlm(responses=["ok"])
    leaf = LlmAgent(name="leaf", model=model, disallow_transfer_to_parent=True,
                    disallow_transfer_to_peers=True)
    runner = InMemoryRunner(leaf)
    sid = (await runner.session_service.create_session(app_name=runner.app_name, user_id="u")).id
    await turn(runner, sid, "x")
    assert model.requests[0].config.tools is None
