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
