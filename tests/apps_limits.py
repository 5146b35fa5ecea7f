"""An app whose model never stops calling a remote long-running tool (for max_llm_calls)."""

from __future__ import annotations

from typing import Any

from google.genai import types

from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool
from orchestrator.models.fake import FunctionLlm


def next_page(page: int) -> dict[str, Any]:
    """Fetch one more page (long-running: runs on a worker, answered at once)."""
    return {"page": page + 1}


def _endless_model(request: LlmRequest) -> Any:
    # Always asks for the next page: only max_llm_calls ends this invocation.
    pages = sum(1 for c in request.contents for p in c.parts or [] if p.function_response)
    return types.Part(function_call=types.FunctionCall(name="next_page", args={"page": pages}))


endless_app = App(name="endless", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_endless_model),
    tools=[LongRunningFunctionTool(next_page)]))
