"""Apps whose tools do what careless code does: ``sys.exit`` on bad input, return or store what
is not JSON. The model says ``call <tool>``: it calls that tool once, then answers with the
response it got. Every start of a tool is recorded in Redis (:func:`runs_key`), so a test can
tell how often it ran and on which attempt.
"""

from __future__ import annotations

import os
from typing import Any

import redis
from google.genai import types

from config import get_settings
from orchestrator import App, FunctionTool, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.agents.parallel_agent import ParallelAgent
from orchestrator.apps.app import ResumabilityConfig
from orchestrator.models.fake import FunctionLlm
from tests.apps import function_responses, last_user_text


def runs_key(invocation_id: str) -> str:
    """The Redis list where each start of a tool records ``<tool> <pid> <call id> <attempt>``."""
    return f"adk-test:careless:{invocation_id}"


def _record(tool_context: ToolContext, what: str) -> None:
    client = redis.Redis.from_url(get_settings().redis_url or "", decode_responses=True)
    try:
        client.rpush(runs_key(tool_context.invocation_id),
                     f"{what} {os.getpid()} {tool_context.function_call_id} {tool_context.attempt}")
    finally:
        client.close()


class Opaque:
    """Not JSON."""

    def __repr__(self) -> str:
        return "<Opaque>"


def raise_sysexit(tool_context: ToolContext) -> dict[str, Any]:
    """What a tool wrapping argparse does on bad input."""
    _record(tool_context, "raise_sysexit")
    raise SystemExit(3)


async def araise_sysexit(tool_context: ToolContext) -> dict[str, Any]:
    """The same from an async tool (it runs on the worker's loop thread)."""
    _record(tool_context, "araise_sysexit")
    raise SystemExit(3)


def raise_kbint(tool_context: ToolContext) -> dict[str, Any]:
    """A KeyboardInterrupt of the tool's own (no Ctrl-C reaches a tool thread)."""
    _record(tool_context, "raise_kbint")
    raise KeyboardInterrupt


def raise_genexit(tool_context: ToolContext) -> dict[str, Any]:
    """A GeneratorExit escaping a tool (a generator closed carelessly)."""
    _record(tool_context, "raise_genexit")
    raise GeneratorExit


def plain(tool_context: ToolContext) -> dict[str, Any]:
    """A healthy tool: the next job a worker must still run."""
    _record(tool_context, "plain")
    return {"ok": True, "pid": os.getpid()}


def ret_object(tool_context: ToolContext) -> dict[str, Any]:
    """A result that is not JSON."""
    _record(tool_context, "ret_object")
    return {"value": Opaque()}


def ret_nan(tool_context: ToolContext) -> dict[str, Any]:
    """A result that is not strict JSON (NaN)."""
    _record(tool_context, "ret_nan")
    return {"value": float("nan")}


def state_object(tool_context: ToolContext) -> dict[str, Any]:
    """A state write that is not JSON."""
    _record(tool_context, "state_object")
    tool_context.state["thing"] = Opaque()
    return {"ok": True}


TOOLS = [raise_sysexit, araise_sysexit, raise_kbint, raise_genexit, plain, ret_object, ret_nan,
         state_object]


def _model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        name = (last_user_text(request) or "call plain").split()[1]
        return types.Part(function_call=types.FunctionCall(name=name, args={}))
    return "answer: " + repr(answers[-1].response)[:300]


careless_app = App(name="careless", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_model),
    tools=[LongRunningFunctionTool(t) for t in TOOLS]))
"""Every tool on workers (long-running tools go to the tools queue)."""


def _branch_model(tool: str):
    def answer(request: LlmRequest) -> Any:
        if not function_responses(request):
            return types.Part(function_call=types.FunctionCall(name=tool, args={}))
        return f"{tool} branch done: {function_responses(request)[-1].response!r}"[:200]
    return answer


def _branches(*tools: str) -> ParallelAgent:
    by_name = {t.__name__: t for t in TOOLS}
    return ParallelAgent(name="fan", sub_agents=[
        LlmAgent(name=f"b_{t}", model=FunctionLlm(record_requests=False, fn=_branch_model(t)),
                 tools=[FunctionTool(by_name[t])])
        for t in tools])


branch_sysexit_app = App(name="careless_branches", root_agent=_branches("plain", "raise_sysexit"),
                         resumability_config=ResumabilityConfig(is_resumable=True))
"""A ParallelAgent whose branches run on workers: one healthy, one whose tool calls sys.exit."""

branch_not_json_app = App(name="careless_json_branches",
                          root_agent=_branches("plain", "ret_object", "ret_nan", "state_object"),
                          resumability_config=ResumabilityConfig(is_resumable=True))
"""A ParallelAgent whose branches run on workers: one healthy, three whose tool returns or
stores what is not JSON."""


APP_SPECS = ("tests.apps_careless:careless_app,tests.apps_careless:branch_sysexit_app,"
             "tests.apps_careless:branch_not_json_app")
