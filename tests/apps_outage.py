"""An app whose remote tool waits for the test, outside Redis; importable by worker subprocesses.

``released``: its tool (on a worker) writes ``<path>.started`` and waits until the file
``<path>`` exists, so a test can restart Redis while a run is under way and let the run
finish once Redis is back. The gate is a file, not a Redis key: the tool must not notice the
outage. The message ``file <path>`` calls it at once; ``ask <path>`` first calls
``ask_human`` (answered from outside, by the client's next message), then it. The model is a
stateless function of the request, like tests/apps.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from google.genai import types

from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.models.fake import FunctionLlm
from tests.apps import function_responses, last_user_text

WAIT_SECONDS = 120.0
"""The longest the tool waits for its file before answering ``released: False``."""


def wait_for_file(path: str, tool_context: ToolContext) -> dict[str, Any]:
    """Say it started (``<path>.started``), then wait until the file ``path`` exists."""
    Path(f"{path}.started").write_text(tool_context.invocation_id)
    deadline = time.monotonic() + WAIT_SECONDS
    while not Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return {"released": Path(path).exists(), "name": Path(path).name}


def ask_human(question: str) -> None:
    """Ask a person; the answer comes later, from outside."""
    return None


def _model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    kind, _, path = last_user_text(request).partition(" ")
    if kind == "ask" and not answers:
        return types.Part(function_call=types.FunctionCall(name="ask_human", args={"question": "go?"}))
    if len(answers) < (2 if kind == "ask" else 1):
        return types.Part(function_call=types.FunctionCall(name="wait_for_file", args={"path": path}))
    response = answers[-1].response or {}
    return f"{response.get('name')} released={response.get('released')}"


released_app = App(name="released", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_model),
    tools=[LongRunningFunctionTool(wait_for_file), LongRunningFunctionTool(ask_human)]))

APP_SPECS = "tests.apps_outage:released_app"
