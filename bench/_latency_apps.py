"""Apps for bench/remote_tool_latency.py: one remote long-running tool that answers at once.

The model is a stateless function of the request (like tests/apps.py), so any orchestrator
process answers the same way: a call to ``quick_tool`` first, a final text once answered.
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool
from orchestrator.models.fake import FunctionLlm


def quick_tool(n: int) -> dict[str, Any]:
    """A remote tool with no work of its own: the round trip is all overhead."""
    return {"n": n, "ok": True}


def _model(request: LlmRequest) -> Any:
    answers = [p.function_response for c in request.contents for p in c.parts or []
               if p.function_response]
    if not answers:
        return types.Part(function_call=types.FunctionCall(name="quick_tool", args={"n": 1}))
    return f"done {answers[-1].response.get('n')}"


remote_tool_app = App(name="remote_tool", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(fn=_model, record_requests=False),
    tools=[LongRunningFunctionTool(quick_tool)]))

APP_SPECS = "bench._latency_apps:remote_tool_app"
