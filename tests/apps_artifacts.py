"""An app whose remote tool saves artifacts on a worker (for the HTTP API's artifact routes).

``reports``: the model calls ``write_report`` once; the tool, run on a worker, saves a
session artifact ``report.txt`` and a user artifact ``user:notes.txt``, then answers with the
report's version.
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.models.fake import FunctionLlm
from tests.apps import function_responses, last_user_text


async def write_report(title: str, tool_context: ToolContext) -> dict[str, Any]:
    """Write a report as an artifact of the session (and a note for the user)."""
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

APP_SPECS = "tests.apps_artifacts:reports_app"
