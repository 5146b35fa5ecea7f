"""Apps for cancelling an invocation while its orchestrator is at work on it.

``held_model``: the model waits at a gate before answering (a slow model call);
``held_tool``: an in-process tool waits at a gate, then writes state. Both record that they
started in :func:`started_key` and wait on :func:`gate_key` of the message's last word (a
message whose last word starts with ``free`` passes without waiting). Each model request's
texts and answers are kept in :func:`requests_key`, for a test to see what a later model
call was shown.
"""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis
from google.genai import types

from config import get_settings
from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.models.fake import FunctionLlm


def started_key(label: str) -> str:
    """The Redis list a held step pushes to as it starts."""
    return f"adk-test:cancel:started:{label}"


def gate_key(label: str) -> str:
    """The Redis list a held step waits on."""
    return f"adk-test:cancel:gate:{label}"


def requests_key(label: str) -> str:
    """The Redis list of what each model call of ``label`` was shown (JSON)."""
    return f"adk-test:cancel:requests:{label}"


def _label(request: LlmRequest) -> str:
    texts = [p.text for c in request.contents if c.role == "user" for p in c.parts or [] if p.text]
    return texts[-1].split()[-1] if texts else "none"


def _shown(request: LlmRequest) -> list[Any]:
    shown: list[Any] = []
    for content in request.contents:
        for part in content.parts or []:
            if part.text:
                shown.append(part.text)
            elif part.function_call:
                shown.append(["call", part.function_call.name])
            elif part.function_response:
                shown.append(["answer", part.function_response.name, part.function_response.response])
    return shown


async def _hold(label: str, what: str) -> None:
    client = aioredis.Redis.from_url(get_settings().redis_url or "", socket_timeout=40)
    try:
        await client.rpush(started_key(label), what)
        await client.blpop([gate_key(label)], timeout=30)
    finally:
        await client.aclose()


async def _note(request: LlmRequest) -> str:
    label = _label(request)
    client = aioredis.Redis.from_url(get_settings().redis_url or "")
    try:
        await client.rpush(requests_key(label), json.dumps(_shown(request)))
    finally:
        await client.aclose()
    return label


async def _held_model(request: LlmRequest) -> Any:
    label = await _note(request)
    if not label.startswith("free"):
        await _hold(label, "model")
    return f"answered {label}"


held_model_app = App(name="held_model", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_held_model), output_key="out"))


async def held_step(label: str, tool_context: ToolContext) -> dict[str, Any]:
    """Wait at the gate, then write state."""
    await _hold(label, "tool")
    tool_context.state["step_done"] = label
    return {"label": label}


async def _held_tool_model(request: LlmRequest) -> Any:
    label = await _note(request)
    answered = any(p.function_response for c in request.contents[-1:] for p in c.parts or [])
    if label.startswith("free") or answered:
        return f"done {label}"
    return types.Part(function_call=types.FunctionCall(name="held_step", args={"label": label}))


held_tool_app = App(name="held_tool", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_held_tool_model),
    tools=[held_step]))

APP_SPECS = "tests.apps_cancel:held_model_app,tests.apps_cancel:held_tool_app"


def _parked_and_held_model(request: LlmRequest) -> Any:
    label = _label(request)
    if any(p.function_response for c in request.contents[-1:] for p in c.parts or []):
        return f"done {label}"
    return [types.Part(function_call=types.FunctionCall(name="parked_tool", args={"tag": label})),
            types.Part(function_call=types.FunctionCall(name="held_step", args={"label": label}))]


def _parked_remote() -> LongRunningFunctionTool:
    from orchestrator.distributed.transport import QUEUE_METADATA_KEY
    from tests.apps import PARKED_QUEUE, parked_tool

    tool = LongRunningFunctionTool(parked_tool)
    tool.custom_metadata = {QUEUE_METADATA_KEY: PARKED_QUEUE}
    return tool


parked_and_held_app = App(name="parked_and_held", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_parked_and_held_model),
    tools=[_parked_remote(), held_step]))
"""One turn, two calls: a remote long-running one on the "parked" queue (no worker takes it
unless a test starts one) and the in-process ``held_step``: a cancel taken while the
orchestrator runs the latter finds a remote call open."""

PARKED_AND_HELD_SPEC = "tests.apps_cancel:parked_and_held_app"
