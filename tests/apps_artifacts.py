"""An app whose remote tool saves artifacts on a worker (for the HTTP API's artifact routes).

``reports``: the model calls ``write_report`` once; the tool, run on a worker, saves a
session artifact ``report.txt`` and a user artifact ``user:notes.txt``, then answers with the
report's version. ``local_reports``: the same tool as a plain tool, run on the orchestrator, with an error
callback that answers any failure of the tool.
Each start of the tool is counted in :func:`starts_key` of its invocation.
"""

from __future__ import annotations

from typing import Any

import redis
from google.genai import types

from config import get_settings
from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.models.fake import FunctionLlm
from tests.apps import function_responses, last_user_text


def starts_key(invocation_id: str) -> str:
    """The Redis counter of the starts of ``write_report`` in ``invocation_id``."""
    return f"adk-test:report-starts:{invocation_id}"


async def write_report(title: str, tool_context: ToolContext) -> dict[str, Any]:
    """Write a report as an artifact of the session (and a note for the user)."""
    with redis.Redis.from_url(get_settings().redis_url or "") as counter:
        counter.incr(starts_key(tool_context.invocation_id))
    version = await tool_context.save_artifact("report.txt", types.Part(text=f"report: {title}"))
    await tool_context.save_artifact("user:notes.txt", types.Part(text="kept for every session"))
    return {"version": version}


def _reports_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return types.Part(function_call=types.FunctionCall(
            name="write_report", args={"title": last_user_text(request)}))
    return f"saved version {answers[-1].response.get('version')}"


reports_app = App(name="reports", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_reports_model),
    tools=[LongRunningFunctionTool(write_report)]))

def _error_as_answer(tool: Any, args: dict[str, Any], tool_context: ToolContext,
                     error: Exception) -> dict[str, Any]:
    """An error callback that answers every failure for the tool (the model reads it)."""
    return {"tool_error": f"{type(error).__name__}: {error}"}


local_reports_app = App(name="local_reports", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_reports_model),
    tools=[write_report], on_tool_error_callback=_error_as_answer))

APP_SPECS = "tests.apps_artifacts:reports_app"
