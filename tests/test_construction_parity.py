"""Building agents, apps and runners, and the synchronous ``Runner.run``, against google-adk 2.13.

Each test runs one small program on google-adk and on ``orchestrator`` (through the namespaces
of ``tests.test_adk_differences``) and compares what a user sees: which constructions are
refused, with which exception and text, and what ``Runner.run`` does around the run.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
from collections.abc import Callable
from typing import Any

import pydantic
import pytest
from google.genai import types

from tests.golden import scenarios as s
from tests.test_adk_differences import assert_same

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore:.*EXPERIMENTAL.*:UserWarning"
)


def refusal(build: Callable[[], Any]) -> tuple[str, str] | str:
    """``build()``'s refusal as (exception type, message), or "accepted".

    A pydantic ValidationError is reduced to its first error's message: the rest names the
    input, which differs between the frameworks' classes.
    """
    try:
        build()
    except pydantic.ValidationError as error:
        return "ValidationError", error.errors()[0]["msg"]
    except Exception as error:  # the type and text are what is compared
        return type(error).__name__, str(error)
    return "accepted"


def runner_class(ns: Any) -> Any:
    """The namespace's ``Runner`` (google-adk's or ours)."""
    module = "google.adk.runners" if ns.LlmAgent.__module__.startswith("google") \
        else "orchestrator.runners"
    return importlib.import_module(module).Runner


# ---------------------------------------------------------------------------------------------
# Agents


def agent_checks_scenario(ns: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        name: refusal(lambda name=name: ns.LlmAgent(name=name))
        for name in ("1abc", "a-b", "", "user", "_ok")
    }
    child = ns.LlmAgent(name="child")
    ns.LlmAgent(name="p1", sub_agents=[child])
    result["second parent"] = refusal(lambda: ns.LlmAgent(name="p2", sub_agents=[child]))
    twice = ns.LlmAgent(name="twice")
    result["listed twice"] = refusal(lambda: ns.SequentialAgent(name="p", sub_agents=[twice,
                                                                                     twice]))
    parent = ns.LlmAgent(name="parent", sub_agents=[ns.LlmAgent(name="leaf")])
    result["clone parent_agent"] = refusal(lambda: parent.clone(update={"parent_agent": None}))
    result["clone unknown field"] = refusal(lambda: parent.clone(update={"nope": 1}))
    return result


def test_agent_names_parents_and_clone_updates_are_refused_as_in_google_adk() -> None:
    result = assert_same(agent_checks_scenario)
    assert result["listed twice"][0] == "ValidationError"
    assert result["_ok"] == "accepted"


def llm_agent_arguments_scenario(ns: Any) -> dict[str, Any]:
    config = types.GenerateContentConfig
    declaration = types.Tool(function_declarations=[types.FunctionDeclaration(name="f")])
    configs = {
        "config tools": config(tools=[declaration]),
        "config system_instruction": config(system_instruction="be brief"),
        "config response_schema": config(response_schema={"type": "OBJECT"}),
        "config base_url": config(http_options=types.HttpOptions(base_url="http://x")),
        "config temperature": config(temperature=0.1),
    }
    result: dict[str, Any] = {
        label: refusal(lambda c=c: ns.LlmAgent(name="a", generate_content_config=c))
        for label, c in configs.items()
    }
    for label, kwargs in {
        "temperature": {"name": "a", "temperature": 0.2},
        "two settings": {"name": "a", "topP": 0.5, "max_output_tokens": 9, "bogus": 1},
        "system_instruction": {"name": "a", "system_instruction": "x"},
        "response_schema": {"name": "a", "response_schema": {}},
        "http_options base_url": {"name": "a", "http_options": {"base_url": "http://x"}},
        "no name": {"temperature": 0.2},
        "only unknown": {"name": "a", "bogus": 1},
    }.items():
        result[label] = refusal(lambda kwargs=kwargs: ns.LlmAgent(**kwargs))
    result["agent as tool"] = refusal(lambda: ns.LlmAgent(
        name="a", tools=[ns.SequentialAgent(name="b")]))
    result["explicit None config"] = repr(
        ns.LlmAgent(name="a", generate_content_config=None).generate_content_config)
    result["default config"] = repr(ns.LlmAgent(name="a").generate_content_config)
    return result


def test_llm_agent_arguments_that_belong_elsewhere_are_refused_as_in_google_adk() -> None:
    result = assert_same(llm_agent_arguments_scenario)
    assert "temperature is a GenerateContentConfig field" in result["temperature"][1]
    assert result["agent as tool"][0] == "ValidationError"
    assert result["config temperature"] == "accepted"


def default_model_scenario(ns: Any) -> dict[str, Any]:
    agent_class = ns.LlmAgent
    result: dict[str, Any] = {
        "not a model": refusal(lambda: agent_class.set_default_model(3)),
        "empty": refusal(lambda: agent_class.set_default_model("")),
    }
    h = s.Harness(ns)
    scripted = h.model("scripted")
    try:
        agent_class.set_default_model(scripted)
        result["model given"] = agent_class(name="a").canonical_model is scripted
        agent_class.set_default_model("gemini-2.0-flash")
        result["name given"] = agent_class(name="a").canonical_model.model
        result["DEFAULT_MODEL"] = agent_class.DEFAULT_MODEL
    finally:
        agent_class.set_default_model("gemini-3.5-flash")
    return result


def test_set_default_model_takes_a_name_or_a_model_and_refuses_others() -> None:
    result = assert_same(default_model_scenario)
    assert result["model given"] is True
    assert result["DEFAULT_MODEL"] == "gemini-3.5-flash"


# ---------------------------------------------------------------------------------------------
# App and Runner


def app_and_runner_scenario(ns: Any) -> dict[str, Any]:
    agent = ns.LlmAgent(name="a")
    runner = runner_class(ns)
    sessions = ns.InMemorySessionService
    result: dict[str, Any] = {
        f"app name {name!r}": refusal(lambda name=name: ns.App(name=name, root_agent=agent))
        for name in ("my app", "1app", "user", "app-1")
    }
    result["no root agent"] = refusal(lambda: ns.App(name="x"))
    result["root agent None"] = refusal(lambda: ns.App(name="x", root_agent=None))
    # A dict is no agent (google-adk names its BaseNode there; the type is what matters).
    result["root agent dict"] = refusal(
        lambda: ns.App(name="x", root_agent={"name": "q"}))[0]
    app = ns.App(name="appx", root_agent=agent)
    result["app and agent"] = refusal(lambda: runner(app=app, agent=agent,
                                                     session_service=sessions()))
    result["app, agent and plugins"] = refusal(lambda: runner(
        app=app, agent=agent, plugins=[], session_service=sessions()))
    result["neither"] = refusal(lambda: runner(session_service=sessions()))
    result["agent without app_name"] = refusal(lambda: runner(agent=agent,
                                                              session_service=sessions()))
    return result


def test_app_and_runner_arguments_are_refused_as_in_google_adk() -> None:
    result = assert_same(app_and_runner_scenario)
    assert result["app name 'app-1'"] == "accepted"
    assert result["root agent dict"] == "ValidationError"


# ---------------------------------------------------------------------------------------------
# Runner.run, the synchronous wrapper


def sync_runner(ns: Any, agent: Any, plugins: list[Any] | None = None) -> tuple[Any, str]:
    """An InMemoryRunner for ``agent`` (in an App with ``plugins``) and a new session's id."""
    runner = ns.InMemoryRunner(app=ns.App(name="app", root_agent=agent, plugins=plugins or []))
    session = asyncio.run(runner.session_service.create_session(app_name="app", user_id="u"))
    return runner, session.id


def sync_cancelled_scenario(ns: Any) -> tuple[str, str, str]:
    class Cancelled(ns.BaseAgent):  # type: ignore[name-defined,misc]
        async def _run_async_impl(self, ctx: Any) -> Any:
            raise asyncio.CancelledError("stopped")
            yield  # pragma: no cover

    runner, session_id = sync_runner(ns, Cancelled(name="c"))
    try:
        list(runner.run(user_id="u", session_id=session_id, new_message=s.user_text("go")))
    except BaseException as error:  # a CancelledError would escape `except Exception`
        return type(error).__name__, str(error), type(error.__cause__).__name__
    return "nothing raised", "", ""


def test_a_cancelled_sync_run_is_reported_as_a_runtime_error() -> None:
    """Raised as it is, a CancelledError would read as the caller itself being cancelled."""
    assert assert_same(sync_cancelled_scenario) == (
        "RuntimeError", "Agent run terminated by CancelledError.", "CancelledError")


def sync_closed_early_scenario(ns: Any) -> tuple[list[str], int]:
    said: list[str] = []

    class Waiting(ns.BaseAgent):  # type: ignore[name-defined,misc]
        async def _run_async_impl(self, ctx: Any) -> Any:
            yield ns.Event(invocation_id=ctx.invocation_id, author=self.name,
                           content=s.user_text("first"))
            try:
                # Nothing sets it: only a cancel ends this wait early (bounded, so that a
                # run that is not cancelled still ends).
                await asyncio.wait_for(asyncio.Event().wait(), timeout=10)
                said.append("waited to the end")
            except asyncio.CancelledError:
                said.append("cancelled")
                raise
            yield ns.Event(invocation_id=ctx.invocation_id, author=self.name,
                           content=s.user_text("second"))

    class Listener(ns.BasePlugin):  # type: ignore[name-defined,misc]
        async def after_run_callback(self, *, invocation_context: Any) -> None:
            said.append("after_run")

    runner, session_id = sync_runner(ns, Waiting(name="w"), [Listener(name="listener")])
    events = runner.run(user_id="u", session_id=session_id, new_message=s.user_text("go"))
    next(events)
    events.close()  # joins the run's thread: it has ended when this returns
    session = asyncio.run(runner.session_service.get_session(
        app_name="app", user_id="u", session_id=session_id))
    return said, len(session.events)


def test_closing_a_sync_run_early_cancels_the_run_and_still_runs_after_run() -> None:
    assert assert_same(sync_closed_early_scenario) == (["cancelled", "after_run"], 2)


CALLER = contextvars.ContextVar("caller", default="unset")


def sync_context_scenario(ns: Any) -> list[str]:
    seen: list[str] = []

    class Reader(ns.BaseAgent):  # type: ignore[name-defined,misc]
        async def _run_async_impl(self, ctx: Any) -> Any:
            seen.append(CALLER.get())
            return
            yield  # pragma: no cover

    runner, session_id = sync_runner(ns, Reader(name="r"))
    token = CALLER.set("the caller's")
    try:
        list(runner.run(user_id="u", session_id=session_id, new_message=s.user_text("go")))
    finally:
        CALLER.reset(token)
    return seen


def test_a_sync_run_sees_the_callers_context_variables() -> None:
    """E.g. a trace or request id the caller set reaches the run's thread."""
    assert assert_same(sync_context_scenario) == ["the caller's"]
