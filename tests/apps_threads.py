"""Apps whose synchronous tools must all be running at once to finish (a barrier of N).

N is one more than Python's default executor has threads on this machine (and at least 8):
run in turns on that executor, the barrier breaks and the tools answer an error instead.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from google.genai import types

from orchestrator import App, FunctionTool, LlmAgent, LlmRequest, ParallelAgent, ResumabilityConfig
from orchestrator.models.fake import FunctionLlm

DEFAULT_EXECUTOR_THREADS = min(32, (os.cpu_count() or 1) + 4)
"""What ``asyncio.to_thread`` runs on (Python's default executor)."""
N = max(8, DEFAULT_EXECUTOR_THREADS + 1)
BARRIER_TIMEOUT = 20.0
"""Only reached when the calls do not all run at once (the failure this guards against)."""

_barrier = threading.Barrier(N, timeout=BARRIER_TIMEOUT)


def rendezvous(who: str) -> str:
    """Wait until every caller is here."""
    try:
        _barrier.wait()
    except threading.BrokenBarrierError:
        return f"{who} waited alone"
    return f"{who} met the others"


def _answered(request: LlmRequest) -> bool:
    return any(p.function_response for c in request.contents for p in c.parts or [])


def _meet(name: str, calls: int):
    def answer(request: LlmRequest) -> Any:
        if _answered(request):
            return "done"
        return [types.Part(function_call=types.FunctionCall(name="rendezvous", args={"who": f"{name}.{i}"}))
                for i in range(calls)]
    return FunctionLlm(fn=answer, record_requests=False)


def fan_out_root(branches: int = N) -> ParallelAgent:
    """A ParallelAgent of ``branches`` agents, each making one rendezvous call."""
    return ParallelAgent(name="fan", sub_agents=[
        LlmAgent(name=f"b{i}", model=_meet(f"b{i}", 1), tools=[FunctionTool(rendezvous)])
        for i in range(branches)
    ])


def one_turn_agent(calls: int = N) -> LlmAgent:
    """One agent whose model makes ``calls`` rendezvous calls in one turn."""
    return LlmAgent(name="agent", model=_meet("call", calls), tools=[FunctionTool(rendezvous)])


threads_fanout_app = App(name="threads_fanout", root_agent=fan_out_root(),
                         resumability_config=ResumabilityConfig(is_resumable=True))
"""Branches as jobs on workers (a resumable app)."""

threads_turn_app = App(name="threads_turn", root_agent=one_turn_agent())
"""One turn's calls, routed to workers by the setting ``tool_queues``."""

APP_SPECS = "tests.apps_threads:threads_fanout_app,tests.apps_threads:threads_turn_app"
