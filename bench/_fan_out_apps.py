"""Apps for bench/fan_out.py's worker runs: 8 calls of 0.5 s, as branches or in one turn."""

from __future__ import annotations

from typing import Any

from google.genai import types

from bench._fan_out_workload import CALLS, wait_sync
from orchestrator import App, LlmAgent, LlmRequest, ParallelAgent, ResumabilityConfig
from orchestrator.models.fake import FunctionLlm


def _asking(calls: int):
    def answer(request: LlmRequest) -> Any:
        if any(p.function_response for c in request.contents for p in c.parts or []):
            return "done"
        return [types.Part(function_call=types.FunctionCall(name="wait_sync", args={"who": str(i)}))
                for i in range(calls)]
    return FunctionLlm(fn=answer, record_requests=False)


branches_app = App(
    name="fan_branches",
    root_agent=ParallelAgent(name="fan", sub_agents=[
        LlmAgent(name=f"b{i}", model=_asking(1), tools=[wait_sync]) for i in range(CALLS)
    ]),
    resumability_config=ResumabilityConfig(is_resumable=True),
)
"""Each branch an ``adk_celery.run_agent`` job on a worker."""

turn_app = App(name="fan_turn", root_agent=LlmAgent(name="agent", model=_asking(CALLS), tools=[wait_sync]))
"""Each call an ``adk_celery.run_tool`` job (``wait_sync`` is routed by ``tool_queues``)."""

APP_SPECS = "bench._fan_out_apps:branches_app,bench._fan_out_apps:turn_app"
