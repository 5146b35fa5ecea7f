"""Building agents, apps and runners, and the synchronous ``Runner.run``, against google-adk 2.13.

Each test runs one small program on google-adk and on ``orchestrator`` (through the namespaces
of ``tests.test_adk_differences``) and compares what a user sees: which constructions are
refused, with which exception and text, and what ``Runner.run`` does around the run.
"""

from __future__ import annotations

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
