"""Apps for bench/scale_out.py: stateless models, tools that wait like I/O does."""

from __future__ import annotations

import time
from typing import Any

from google.genai import types

from orchestrator import (
    App,
    FunctionTool,
    LlmAgent,
    LlmRequest,
    LongRunningFunctionTool,
    ParallelAgent,
    ResumabilityConfig,
)
from orchestrator.models.fake import FunctionLlm

BRANCHES = 8


def _answered(request: LlmRequest) -> bool:
    return any(p.function_response for c in request.contents for p in c.parts or [])


def _call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def wait_io(seconds: float) -> dict[str, Any]:
    """Stand-in for an I/O-bound call: waits, then answers."""
    time.sleep(seconds)
    return {"waited": seconds}


def _waiting_model(seconds: float):
    def answer(request: LlmRequest) -> Any:
        return "done" if _answered(request) else _call("wait_io", seconds=seconds)
    return FunctionLlm(fn=answer, record_requests=False)


fanout_app = App(
    name="fanout",
    root_agent=ParallelAgent(name="fan", sub_agents=[
        LlmAgent(name=f"branch_{i}", model=_waiting_model(0.5), tools=[FunctionTool(wait_io)])
        for i in range(BRANCHES)
    ]),
    resumability_config=ResumabilityConfig(is_resumable=True),
)

scale_app = App(name="scale", root_agent=LlmAgent(
    name="agent", model=_waiting_model(0.2), tools=[LongRunningFunctionTool(wait_io)]))


def wait_for_human(question: str) -> None:
    """Needs an answer from outside."""
    return None


def _asking(request: LlmRequest) -> Any:
    return "answered" if _answered(request) else _call("wait_for_human", question="ok?")


paused_app = App(name="paused", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(fn=_asking, record_requests=False),
    tools=[LongRunningFunctionTool(wait_for_human)]))

APP_SPECS = "bench._scale_apps:fanout_app,bench._scale_apps:scale_app,bench._scale_apps:paused_app"


def _busy_model(request: LlmRequest) -> Any:
    """A model whose answer costs 20 ms of CPU in the orchestrator (parsing, tokenising...)."""
    deadline = time.process_time() + 0.02
    while time.process_time() < deadline:
        pass
    return "done"


model_bound_app = App(name="model_bound", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(fn=_busy_model, record_requests=False)))

APP_SPECS += ",bench._scale_apps:model_bound_app"
