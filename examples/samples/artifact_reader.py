"""An agent that writes a report as an artifact and reads it back with ``load_artifacts``.

The shape of ADK's artifact samples: one tool saves a file through the tool context, and
the built-in ``load_artifacts`` tool lets the model ask for a file by name; its content then
reaches the model in the next request.
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from examples.samples._offline import answers, call, model_or_offline
from orchestrator.agents import Agent
from orchestrator.apps import App
from orchestrator.models.llm_request import LlmRequest
from orchestrator.tools import load_artifacts
from orchestrator.tools.tool_context import ToolContext

REPORT = "report.txt"


async def write_report(topic: str, tool_context: ToolContext) -> dict[str, Any]:
    """Write a short report on a topic and save it as the artifact ``report.txt``."""
    text = f"Report on {topic}: three findings, all positive."
    version = await tool_context.save_artifact(REPORT, types.Part.from_text(text=text))
    return {"saved": REPORT, "version": version}


def _artifact_texts(request: LlmRequest) -> list[str]:
    """Texts the request carries from loaded artifacts (ADK adds them as user content)."""
    return [p.text for c in request.contents for p in c.parts or []
            if p.text and p.text.startswith("Report on")]


def _model(request: LlmRequest) -> Any:
    done = answers(request)
    if "write_report" not in done:
        return call("write_report", topic="the pilot")
    if "load_artifacts" not in done:
        return call("load_artifacts", artifact_names=[REPORT])
    texts = _artifact_texts(request)
    return f"The report says: {texts[-1]}" if texts else "I could not read the report."


root_agent = Agent(
    name="report_writer",
    model=model_or_offline(_model),
    description="Writes reports and reads them back.",
    instruction="Write the report with write_report, then read it with load_artifacts.",
    tools=[write_report, load_artifacts],
)

app = App(name="report_writer", root_agent=root_agent)
