"""Resumable LoopAgent apps whose agents call a plain tool, with callbacks counting into state.

``loop_of_sequence``: ``loop[seq[a, b], c]``, two iterations; a and b call ``plain`` in
each and then answer ("A answered", "B answered"), c says "C". ``loop_then_call``:
``loop[w, c]``, two iterations; w answers "W first" in the first and calls ``plain`` in the
second only (so the first answer of a worker is in iteration 2), then says "W answered".
Each agent callback and the ``counting`` plugin's add one to ``b_<agent>``, ``a_<agent>``,
``pb_<agent>``, ``pa_<agent>``.

Each app is built with its tool on workers (the module's apps, importable by orchestrator
and worker processes) or in process (the run to compare with). The models are stateless
functions of the request.
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from orchestrator import (
    App,
    FunctionTool,
    LlmAgent,
    LlmRequest,
    LoopAgent,
    ResumabilityConfig,
    SequentialAgent,
)
from orchestrator.models.fake import FunctionLlm
from tests.apps_transfers import CountingPlugin, count_after, count_before, plain
from tests.support.action_tools import remote

CALLBACKS = {"before_agent_callback": count_before, "after_agent_callback": count_after}


def _answered_last(request: LlmRequest) -> bool:
    """True if the request's last content answers a call (the agent's own tool call)."""
    last = request.contents[-1] if request.contents else None
    return bool(last and any(p.function_response for p in last.parts or []))


def _said(request: LlmRequest, text: str) -> bool:
    return any(p.text == text for c in request.contents for p in c.parts or [])


def _call_plain() -> types.Part:
    return types.Part(function_call=types.FunctionCall(name="plain", args={}))


def _tool(on_workers: bool) -> FunctionTool:
    return remote(plain) if on_workers else FunctionTool(plain)


def _agent(name: str, fn: Any, tools: list[Any]) -> LlmAgent:
    return LlmAgent(name=name, model=FunctionLlm(record_requests=False, fn=fn), tools=tools,
                    **CALLBACKS)


def _app(name: str, root: LoopAgent) -> App:
    return App(name=name, root_agent=root, plugins=[CountingPlugin()],
               resumability_config=ResumabilityConfig(is_resumable=True))


def loop_of_sequence(on_workers: bool) -> App:
    """``loop[seq[a, b], c]`` twice: a and b call ``plain`` in each iteration."""
    def calling(name: str) -> LlmAgent:
        answer = f"{name.upper()} answered"
        return _agent(name, lambda r: answer if _answered_last(r) else _call_plain(),
                      [_tool(on_workers)])

    seq = SequentialAgent(name="seq", sub_agents=[calling("a"), calling("b")], **CALLBACKS)
    c = _agent("c", lambda r: "C", [])
    return _app("loop_of_sequence", LoopAgent(name="loop", max_iterations=2,
                                              sub_agents=[seq, c], **CALLBACKS))


def _w_model(request: LlmRequest) -> Any:
    if _answered_last(request):
        return "W answered"
    return _call_plain() if _said(request, "W first") else "W first"


def loop_then_call(on_workers: bool) -> App:
    """``loop[w, c]`` twice: w calls ``plain`` in the second iteration only."""
    w = _agent("w", _w_model, [_tool(on_workers)])
    c = _agent("c", lambda r: "C", [])
    return _app("loop_then_call", LoopAgent(name="loop", max_iterations=2, sub_agents=[w, c],
                                            **CALLBACKS))


loop_of_sequence_app = loop_of_sequence(True)
loop_then_call_app = loop_then_call(True)

LOOP_APP_SPECS = "tests.apps_loops:loop_of_sequence_app,tests.apps_loops:loop_then_call_app"
