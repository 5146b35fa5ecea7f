"""A resumable app whose resume runs long: for requests that arrive while it runs.

``slow_resume``: ``SequentialAgent[a, b]``; ``a`` asks for an approval (a long-running call
answered from outside) and answers once it has it; ``b``'s model call then waits until the
test pushes to :data:`GATE` (BLPOP, bounded): the invocation is mid-resume, its record still
``paused``, with ``a``'s answer committed. Importable by orchestrator subprocesses.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from google.genai import types

from config import get_settings
from orchestrator import (
    App,
    LlmAgent,
    LlmRequest,
    LongRunningFunctionTool,
    ResumabilityConfig,
    SequentialAgent,
)
from orchestrator.models.fake import FunctionLlm
from tests.apps import function_responses

GATE = "adk-test:slow-resume-gate"
"""The Redis list ``b``'s model call waits on (one test at a time uses it)."""
GATE_TIMEOUT_SECONDS = 20


def request_approval(amount: int) -> None:
    """Ask a human to approve; the answer comes later."""
    return None


def _a_model(request: LlmRequest) -> Any:
    if not function_responses(request):
        return types.Part(function_call=types.FunctionCall(name="request_approval",
                                                           args={"amount": 1}))
    return "a: approved"


async def _b_model(request: LlmRequest) -> Any:
    client = aioredis.from_url(get_settings().redis_url or "", decode_responses=True)
    try:
        released = await client.blpop([GATE], timeout=GATE_TIMEOUT_SECONDS)
    finally:
        await client.aclose()
    return f"b: done (released={released is not None})"


slow_resume_app = App(name="slow_resume", root_agent=SequentialAgent(name="root", sub_agents=[
    LlmAgent(name="a", model=FunctionLlm(record_requests=False, fn=_a_model),
             tools=[LongRunningFunctionTool(request_approval)]),
    LlmAgent(name="b", model=FunctionLlm(record_requests=False, fn=_b_model)),
]), resumability_config=ResumabilityConfig(is_resumable=True))

APP_SPECS = "tests.apps_slow_resume:slow_resume_app"
