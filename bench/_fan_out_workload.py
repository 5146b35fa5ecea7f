"""The in-process fan-out workload, written once for both frameworks (imports neither).

``turn``: one LlmAgent whose model asks for CALLS tool calls in one turn, then answers.
``branches``: a ParallelAgent of CALLS LlmAgents, each making one call, then answering.
Every call waits WAIT seconds: ``time.sleep`` in a sync tool, ``asyncio.sleep`` in an async
one. One invocation = a fresh session, one message, ``run_async`` drained; its wall time is
what is measured.
"""

# No ``from __future__ import annotations``: the model class is built from the framework's
# BaseLlm inside a function, and pydantic resolves its annotations from real objects.

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.genai import types

CALLS = 8
WAIT = 0.5


@dataclass
class Framework:
    """The classes one side runs the workload with."""

    name: str
    LlmAgent: type
    ParallelAgent: type
    InMemoryRunner: type
    BaseLlm: type
    LlmResponse: type
    capabilities: Callable[[], Any] | None = None
    run_config: Any = None


def wait_sync(who: str) -> str:
    """Wait like a blocking I/O call."""
    time.sleep(WAIT)
    return who


async def wait_async(who: str) -> str:
    """Wait like an awaited I/O call."""
    await asyncio.sleep(WAIT)
    return who


def _model(fw: Framework, calls: int, tool: str) -> Any:
    capabilities = fw.capabilities

    class FanOutLlm(fw.BaseLlm):  # type: ignore[misc,name-defined]
        """Asks for ``calls`` calls when nothing is answered yet, then says done."""

        model: str = "fan-out"

        @property
        def capabilities(self) -> Any:
            return capabilities() if capabilities is not None else None

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            answered = any(p.function_response for c in llm_request.contents for p in c.parts or [])
            if answered:
                parts = [types.Part(text="done")]
            else:
                parts = [types.Part(function_call=types.FunctionCall(name=tool, args={"who": str(i)}))
                         for i in range(calls)]
            yield fw.LlmResponse(content=types.Content(role="model", parts=parts))

    return FanOutLlm()


def build(fw: Framework, shape: str, sync: bool) -> Any:
    """The root agent of ``shape`` (``turn`` or ``branches``) with sync or async tools."""
    tool = wait_sync if sync else wait_async
    if shape == "turn":
        return fw.LlmAgent(name="agent", model=_model(fw, CALLS, tool.__name__), tools=[tool])
    return fw.ParallelAgent(name="fan", sub_agents=[
        fw.LlmAgent(name=f"b{i}", model=_model(fw, 1, tool.__name__), tools=[tool])
        for i in range(CALLS)
    ])


async def one_invocation(fw: Framework, runner: Any) -> float:
    """Seconds for one invocation on a fresh session."""
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="go")])
    kwargs = {"run_config": fw.run_config} if fw.run_config is not None else {}
    start = time.perf_counter()
    events = [e async for e in runner.run_async(user_id="u", session_id=session.id,
                                                new_message=message, **kwargs)]
    took = time.perf_counter() - start
    answered = sum(1 for e in events for p in e.content.parts or [] if p.function_response) if events else 0
    if answered != CALLS:
        raise RuntimeError(f"{fw.name}: {answered} answers instead of {CALLS}")
    return took


def measure(fw: Framework, shape: str, sync: bool) -> float:
    """Wall seconds of one invocation (a fresh runner, one untimed warm-up first)."""
    runner = fw.InMemoryRunner(agent=build(fw, shape, sync), app_name="fan_out")
    asyncio.run(one_invocation(fw, runner))
    return asyncio.run(one_invocation(fw, runner))
