"""A tool given as ``functools.partial`` counts as the function it wraps where a
distributed invocation decides whose answer a call waits for."""

from __future__ import annotations

import asyncio
import functools

import pytest
from google.genai import types

from orchestrator import App, Event, LlmAgent
from orchestrator.agents.agent_runs import answered_by_workers
from orchestrator.distributed.ledger import CallEntry
from orchestrator.distributed.outside_answers import answered_inside
from orchestrator.distributed.registry import AppRegistry


def search(query: str, limit: int) -> str:
    """Search."""
    return "found"


@pytest.mark.parametrize("tool", [search, functools.partial(search, limit=3)],
                         ids=["function", "partial"])
def test_a_partials_call_on_a_worker_is_not_left_to_an_outside_answer(tool):
    """Before, a partial (declared under its function's name) was looked for by its own
    missing ``__name__``: its call on a worker was taken for one waiting for a client."""
    agent = LlmAgent(name="agent", model="gemini-2.5-flash", tools=[tool])
    [declared] = [t.name for t in asyncio.run(agent.canonical_tools(None))]
    call = types.FunctionCall(id="c1", name=declared, args={"query": "x"})
    event = Event(invocation_id="e-1", author="agent",
                  content=types.Content(role="model", parts=[types.Part(function_call=call)]))
    entry = CallEntry(call=call, event=event, long_running=False)
    assert declared == "search"
    assert answered_by_workers(agent, entry) is True
    assert answered_inside(AppRegistry([App(name="app", root_agent=agent)]), "app", [entry]) == ["c1"]
