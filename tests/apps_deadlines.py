"""ParallelAgent apps whose branch (run on a worker, as one branch job) calls a tool that hangs.

``deadline_async``: branch ``slow`` calls an async tool that awaits an event that never
comes (``adk_celery_timeout`` 1 s), then asks whether that call was cancelled.
``deadline_sync``: branch ``stuck`` calls a sync tool that blocks on a threading.Event
(``adk_celery_timeout`` 1 s), then releases it and reads what the late call left in the
state. ``deadline_setting``: as ``deadline_async`` with no metadata (the worker's
``tool_timeout_seconds`` sets the deadline). In each, branch ``fine`` calls a quick tool.
``deadline_free``: no branch; the orchestrator runs a tool that takes 1.5 s in process.
Both hanging tools write the state before they hang (the async one also appends to a
``seen`` list the session holds, if it does); the sync one writes again once released,
after its deadline. Importable by worker subprocesses; the models are stateless
functions of the request.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from google.genai import types

from orchestrator import (
    App,
    FunctionTool,
    LlmAgent,
    LlmRequest,
    ParallelAgent,
    ResumabilityConfig,
    SequentialAgent,
    ToolContext,
)
from orchestrator.distributed.transport import TIMEOUT_METADATA_KEY
from orchestrator.models.fake import FunctionLlm
from tests.apps import function_responses

_lock = threading.Lock()
_cancelled: dict[str, asyncio.Event] = {}
_gates: dict[str, tuple[threading.Event, threading.Event]] = {}


def _call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def _cancelled_event(invocation_id: str) -> asyncio.Event:
    with _lock:
        return _cancelled.setdefault(invocation_id, asyncio.Event())


def _gate(invocation_id: str) -> tuple[threading.Event, threading.Event]:
    """(released, finished) of the sync tool of one invocation."""
    with _lock:
        return _gates.setdefault(invocation_id, (threading.Event(), threading.Event()))


async def hang_async(tool_context: ToolContext) -> dict[str, Any]:
    """Wait for an answer that never comes."""
    tool_context.state["hung_before"] = True
    if isinstance(tool_context.state.get("seen"), list):  # a list the session holds
        tool_context.state["seen"].append("hung")  # changed in place, not assigned
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        _cancelled_event(tool_context.invocation_id).set()
        raise
    return {"never": True}


async def was_cancelled(tool_context: ToolContext) -> dict[str, Any]:
    """Whether the hung call was stopped, and what it left in the state."""
    await _cancelled_event(tool_context.invocation_id).wait()
    seen = {"seen": tool_context.state["seen"]} if "seen" in tool_context.state else {}
    return {"cancelled": True, "hung_before": tool_context.state.get("hung_before"), **seen}


def hang_sync(tool_context: ToolContext) -> dict[str, Any]:
    """Block until released (a sync tool: its thread cannot be interrupted)."""
    released, finished = _gate(tool_context.invocation_id)
    tool_context.state["hung_before"] = True
    try:
        came = released.wait(60)
        tool_context.state["hung_late"] = True
        return {"late": came}
    finally:
        finished.set()


def release(tool_context: ToolContext) -> dict[str, Any]:
    """Release the blocked sync call; say whether it ended and what it left in the state."""
    released, finished = _gate(tool_context.invocation_id)
    released.set()
    return {"finished": finished.wait(20), "hung_before": tool_context.state.get("hung_before"),
            "hung_late": tool_context.state.get("hung_late")}


def tally(word: str) -> dict[str, Any]:
    """Count a word's letters."""
    return {"word": word, "length": len(word)}


def _with_timeout(func: Any, seconds: float | None) -> FunctionTool:
    tool = FunctionTool(func)
    if seconds is not None:
        tool.custom_metadata = {TIMEOUT_METADATA_KEY: seconds}
    return tool


def _two_steps(first: str, then: str, name: str):
    """A model that calls ``first``, then ``then``, then says what it heard."""
    def answer(request: LlmRequest) -> Any:
        answers = function_responses(request)
        if not answers:
            return _call(first)
        if len(answers) == 1:
            return _call(then)
        return f"{name} heard " + "; ".join(str(a.response) for a in answers)
    return FunctionLlm(record_requests=False, fn=answer)


def _tallying(request: LlmRequest) -> Any:
    answers = function_responses(request)
    return _call("tally", word="fine") if not answers else f"fine counted {answers[-1].response['length']}"


def _app(name: str, hanging: LlmAgent) -> App:
    fine = LlmAgent(name="fine", model=FunctionLlm(record_requests=False, fn=_tallying),
                    tools=[FunctionTool(tally)])
    root = SequentialAgent(name="pipeline", sub_agents=[
        ParallelAgent(name="fan", sub_agents=[hanging, fine]),
        LlmAgent(name="after", model=FunctionLlm(record_requests=False, fn=lambda r: "after done")),
    ])
    return App(name=name, root_agent=root, resumability_config=ResumabilityConfig(is_resumable=True))


deadline_async_app = _app("deadline_async", LlmAgent(
    name="slow", model=_two_steps("hang_async", "was_cancelled", "slow"),
    tools=[_with_timeout(hang_async, 1), _with_timeout(was_cancelled, 20)]))

deadline_sync_app = _app("deadline_sync", LlmAgent(
    name="stuck", model=_two_steps("hang_sync", "release", "stuck"),
    tools=[_with_timeout(hang_sync, 1), FunctionTool(release)]))

deadline_setting_app = _app("deadline_setting", LlmAgent(
    name="slow", model=_two_steps("hang_async", "was_cancelled", "slow"),
    tools=[FunctionTool(hang_async), FunctionTool(was_cancelled)]))



async def take_a_while() -> dict[str, Any]:
    """Work for 1.5 s (longer than the deadline the tests set)."""
    await asyncio.sleep(1.5)
    return {"done": True}


def _taking(request: LlmRequest) -> Any:
    answers = function_responses(request)
    return _call("take_a_while") if not answers else f"took {answers[-1].response}"


deadline_free_app = App(name="deadline_free", root_agent=LlmAgent(
    name="here", model=FunctionLlm(record_requests=False, fn=_taking),
    tools=[FunctionTool(take_a_while)]))
"""A tool the orchestrator runs in process: no deadline, whatever the setting."""

DEADLINE_APP_SPECS = ",".join(
    f"tests.apps_deadlines:{name}"
    for name in ("deadline_async_app", "deadline_sync_app", "deadline_setting_app",
                 "deadline_free_app"))
