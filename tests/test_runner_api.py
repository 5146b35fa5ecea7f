"""Runner construction, validation errors (adk-reference §3.3) and the sync ``run``."""

from __future__ import annotations

import pytest
from google.genai import types

from orchestrator import App, InMemoryRunner, InMemorySessionService, LlmAgent, Runner
from orchestrator.errors import SessionNotFoundError
from orchestrator.models.fake import ScriptedLlm
from tests.support.events import call, function_response, simplify_all, user_text


def agent(*responses):
    return LlmAgent(name="root", model=ScriptedLlm(responses=list(responses)))


async def test_missing_session_raises_unless_auto_create():
    runner = InMemoryRunner(agent("hi"))
    with pytest.raises(SessionNotFoundError, match="nope"):
        [e async for e in runner.run_async(user_id="u", session_id="nope", new_message=user_text("x"))]
    auto = Runner(app_name="app", agent=agent("hi"), session_service=InMemorySessionService(),
                  auto_create_session=True)
    events = [e async for e in auto.run_async(user_id="u", session_id="new", new_message=user_text("x"))]
    assert simplify_all(events) == [("root", "hi")]


@pytest.mark.parametrize("message,error", [
    (types.Content(role="user", parts=[call("t")]), "User message cannot contain function calls."),
    (types.Content(role="user", parts=[types.Part(text="x"), types.Part(
        function_response=types.FunctionResponse(id="c", name="t", response={}))]), "both function responses and text"),
])
async def test_invalid_messages_are_rejected_before_anything_is_stored(message, error):
    runner = InMemoryRunner(agent())
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    with pytest.raises(ValueError, match=error):
        [e async for e in runner.run_async(user_id="u", session_id=session.id, new_message=message)]
    stored = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=session.id)
    assert stored.events == []


async def test_function_response_for_an_unknown_call_is_rejected():
    runner = InMemoryRunner(agent())
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    with pytest.raises(ValueError, match="Function call not found for function response ids"):
        [e async for e in runner.run_async(
            user_id="u", session_id=session.id, new_message=function_response("adk-x", "t", {}))]


async def test_model_role_message_is_stored_as_user_and_state_delta_applies():
    runner = InMemoryRunner(agent("ok"))
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    events = [e async for e in runner.run_async(
        user_id="u", session_id=session.id, state_delta={"k": "v"}, yield_user_message=True,
        new_message=types.Content(role="model", parts=[types.Part(text="x")]))]
    assert events[0].author == "user" and events[0].content.role == "user"
    assert events[0].actions.state_delta == {"k": "v"}
    stored = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=session.id)
    assert stored.state == {"k": "v"}


def test_sync_run_yields_events_and_reraises_errors():
    runner = InMemoryRunner(agent("hello"), app_name="demo")
    import asyncio
    session = asyncio.run(runner.session_service.create_session(app_name="demo", user_id="u"))
    events = list(runner.run(user_id="u", session_id=session.id, new_message=user_text("x")))
    assert simplify_all(events) == [("root", "hello")]
    with pytest.raises(SessionNotFoundError):
        list(runner.run(user_id="u", session_id="missing", new_message=user_text("x")))


def test_constructor_rules():
    with pytest.raises(ValueError, match="app_name"):
        Runner(agent=agent(), session_service=InMemorySessionService())
    with pytest.raises(ValueError):
        Runner(session_service=InMemorySessionService())
    app = App(name="my-app", root_agent=agent())
    assert Runner(app=app, session_service=InMemorySessionService()).app_name == "my-app"
    with pytest.raises(ValueError, match="Invalid app name"):
        App(name="9bad", root_agent=agent())


def test_agent_name_and_parent_rules():
    with pytest.raises(ValueError, match="identifier"):
        LlmAgent(name="not valid")
    with pytest.raises(ValueError, match="reserved"):
        LlmAgent(name="user")
    child = LlmAgent(name="child")
    LlmAgent(name="p1", sub_agents=[child])
    with pytest.raises(ValueError, match="already has a parent agent"):
        LlmAgent(name="p2", sub_agents=[child])


async def test_a_run_without_a_message_on_a_new_session_runs_a_root_llm_agent_only():
    from orchestrator import SequentialAgent

    # As google-adk: a root LlmAgent answers from the (empty) history...
    model = ScriptedLlm(responses=["hello"])
    runner = InMemoryRunner(LlmAgent(name="root", model=model))
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    events = [e async for e in runner.run_async(user_id="u", session_id=session.id)]
    assert simplify_all(events) == [("root", "hello")]
    assert model.requests[0].contents == []
    # ...any other root needs a message or an invocation to resume.
    runner = InMemoryRunner(SequentialAgent(name="steps", sub_agents=[
        LlmAgent(name="a", model=ScriptedLlm(responses=["x"]))]))
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    with pytest.raises(ValueError, match="requires either a new_message or an invocation_id"):
        async for _ in runner.run_async(user_id="u", session_id=session.id):
            pass
    stored = await runner.session_service.get_session(app_name=runner.app_name, user_id="u",
                                                      session_id=session.id)
    assert stored.events == []
