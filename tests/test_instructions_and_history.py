"""Instruction templating (§6.2) and history building across agents and branches (§6.6)."""

from __future__ import annotations

import pytest
from google.genai import types

from orchestrator import Event, InMemoryRunner, LlmAgent
from orchestrator.flows.contents import build_contents
from orchestrator.models.fake import ScriptedLlm
from tests.support.events import request_summary, user_text


async def ask(agent: LlmAgent, text: str = "hi", state: dict | None = None):
    runner = InMemoryRunner(agent)
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u", state=state)
    return [e async for e in runner.run_async(user_id="u", session_id=session.id, new_message=user_text(text))]


async def test_instruction_templating_and_identity():
    model = ScriptedLlm(responses=["ok"])
    agent = LlmAgent(
        name="helper", description="Helps.", model=model,
        instruction="Hi {name}, tier {app:tier}, opt [{missing?}], none [{nothing}], keep {not a key} ${literal}.",
    )
    await ask(agent, state={"name": "Ada", "app:tier": "gold", "nothing": None})
    assert model.requests[0].config.system_instruction == (
        "Hi Ada, tier gold, opt [], none [], keep {not a key} ${literal}.\n\n"
        'You are an agent. Your internal name is "helper". The description about you is "Helps.".'
    )


async def test_missing_state_key_raises_key_error():
    agent = LlmAgent(name="helper", model=ScriptedLlm(responses=["ok"]), instruction="{absent}")
    with pytest.raises(KeyError) as raised:
        await ask(agent)
    # google-adk 2.13's words, naming the agent.
    assert raised.value.args[0] == "Context variable not found: `absent` in agent 'helper'."


async def test_instruction_provider_bypasses_templating():
    model = ScriptedLlm(responses=["ok"])
    agent = LlmAgent(name="helper", model=model, instruction=lambda ctx: f"raw {{x}} for {ctx.agent_name}")
    await ask(agent)
    assert model.requests[0].config.system_instruction.startswith("raw {x} for helper")


async def test_generate_content_config_is_copied_per_request_and_validated():
    config = types.GenerateContentConfig(temperature=0.2)
    model = ScriptedLlm(responses=["ok"])
    await ask(LlmAgent(name="a", model=model, generate_content_config=config))
    assert model.requests[0].config.temperature == 0.2
    assert config.system_instruction is None  # the agent's own config is untouched
    with pytest.raises(ValueError, match="System instruction"):
        LlmAgent(name="a", generate_content_config=types.GenerateContentConfig(system_instruction="x"))


def _ev(author, text=None, branch=None, **kw):
    return Event(author=author, branch=branch, invocation_id="e-1",
                 content=types.Content(role="user" if author == "user" else "model",
                                       parts=[types.Part(text=text)]), **kw)


def test_other_agents_turns_become_quoted_context_and_branches_are_isolated():
    events = [
        _ev("user", "question"),
        _ev("writer", "draft text"),
        _ev("a", "from a", branch="par.a"),
        _ev("b", "from b", branch="par.b"),
    ]
    contents = build_contents(events, agent_name="b", branch="par.b")
    summary = request_summary(contents)
    assert summary[0] == "user|text:question"
    assert summary[1].startswith("user|text:For context:")
    assert "[writer] said:\n<<<BEGIN_QUOTED_AGENT_CONTENT>>>\ndraft text\n<<<END_QUOTED_AGENT_CONTENT>>>" in summary[1]
    assert summary[2] == "model|text:from b"
    assert not any("from a" in s for s in summary)
    # An agent with no branch (e.g. after the fan-out) sees every branch.
    downstream = request_summary(build_contents(events, agent_name="after", branch=None))
    assert any("from a" in s for s in downstream) and any("from b" in s for s in downstream)
    sibling_parent = request_summary(build_contents(events, agent_name="x", branch="par.c"))
    assert not any("from a" in s or "from b" in s for s in sibling_parent)


async def test_include_contents_none_sends_only_the_current_turn():
    model = ScriptedLlm(responses=["first", "second"])
    agent = LlmAgent(name="solo", model=model, include_contents="none")
    runner = InMemoryRunner(agent)
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    for text in ("one", "two"):
        [e async for e in runner.run_async(user_id="u", session_id=session.id, new_message=user_text(text))]
    assert request_summary(model.requests[1].contents) == ["user|text:two"]


def test_model_inherits_from_the_nearest_ancestor_else_adk_default():
    from orchestrator import Gemini, SequentialAgent

    leaf = LlmAgent(name="leaf")
    parent_model = ScriptedLlm(responses=[])
    LlmAgent(name="root", model=parent_model, sub_agents=[SequentialAgent(name="seq", sub_agents=[leaf])])
    assert leaf.canonical_model is parent_model
    orphan = LlmAgent(name="orphan")
    assert isinstance(orphan.canonical_model, Gemini)
    assert orphan.canonical_model.model == "gemini-3.5-flash"
