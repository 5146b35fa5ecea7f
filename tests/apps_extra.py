"""Extra apps for the Flower and plain-``send_task`` tests; importable by worker subprocesses.

``gated``: one remote long-running tool that reports progress and then blocks until the test
releases it (or a bounded timeout passes), so a test can watch the call while it is running.
``noted``: the same, its progress report being the user's message (JSON).
``fragile``: the same report and wait, after recording which worker process started it, so a
test can kill that worker mid-call and see the job run again elsewhere. ``slow``: an async
tool that waits 30 s, so a test can cancel its invocation while it runs. ``export_fan``: a
ParallelAgent whose branch's long-running tool is pending on its first run and done on the
next, for two runs of one branch job that differ.
The gate is a Redis list: the test pushes to :func:`gate_key` of the invocation, the tool
pops it with BLPOP. The model is a stateless function of the request, like tests/apps.py.
"""

from __future__ import annotations

import json
from typing import Any

import redis
from google.genai import types

from config import get_settings
from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.apps.app import ResumabilityConfig
from orchestrator.models.fake import FunctionLlm
from tests.apps import _branch_model, _summary_model, function_responses, last_user_text

GATE_TIMEOUT_SECONDS = 15
"""The longest a gated tool waits for its release before answering ``released: False``."""


def gate_key(invocation_id: str) -> str:
    """The Redis list the gated tool of ``invocation_id`` waits on."""
    return f"adk-test:gate:{invocation_id}"


def wait_at_gate(key: str, timeout: float) -> dict[str, Any]:
    """Block on the Redis list ``key`` (BLPOP, at most ``timeout`` s): released, and by what."""
    # redis-py's 5 s default socket timeout would cut a longer BLPOP short.
    client = redis.Redis.from_url(get_settings().redis_url or "", decode_responses=True,
                                  socket_timeout=timeout + 5)
    try:
        popped = client.blpop([key], timeout=timeout)
    finally:
        client.close()
    return {"released": popped is not None, "gate": popped[1] if popped else None}


def gated_step(label: str, tool_context: ToolContext) -> dict[str, Any]:
    """Report progress, then wait until the test releases this invocation's gate."""
    tool_context.report_progress({"step": "waiting for release", "label": label})
    return {"label": label, **wait_at_gate(gate_key(tool_context.invocation_id), GATE_TIMEOUT_SECONDS)}


def _gated_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        text = last_user_text(request)
        label = text.split()[-1] if text else "none"
        return types.Part(function_call=types.FunctionCall(name="gated_step", args={"label": label}))
    response = answers[-1].response or {}
    return f"gated {response.get('label')} released={response.get('released')} by {response.get('gate')}"


gated_app = App(name="gated", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_gated_model),
    tools=[LongRunningFunctionTool(gated_step)]))

def noted_step(note: dict[str, Any], tool_context: ToolContext) -> dict[str, Any]:
    """Report the note as progress, then wait until the test releases this invocation's gate."""
    tool_context.report_progress({"note": note})
    return {"note": note, **wait_at_gate(gate_key(tool_context.invocation_id), GATE_TIMEOUT_SECONDS)}


def _noted_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:  # the user's message is the note, as JSON
        note = json.loads(last_user_text(request))
        return types.Part(function_call=types.FunctionCall(name="noted_step", args={"note": note}))
    return f"noted, released={(answers[-1].response or {}).get('released')}"


noted_app = App(name="noted", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_noted_model),
    tools=[LongRunningFunctionTool(noted_step)]))
"""A remote tool reporting what the user's message holds (any JSON) as its progress."""


def runs_key(invocation_id: str) -> str:
    """The Redis list where each start of the fragile tool records ``pid call_id``."""
    return f"adk-test:runs:{invocation_id}"


def fragile_step(label: str, tool_context: ToolContext) -> dict[str, Any]:
    """Report progress and record this start (worker pid, call id), then wait at the gate."""
    import os

    tool_context.report_progress({"step": "waiting for release", "label": label, "pid": os.getpid()})
    client = redis.Redis.from_url(get_settings().redis_url or "", decode_responses=True)
    try:
        client.rpush(runs_key(tool_context.invocation_id), f"{os.getpid()} {tool_context.function_call_id}")
        client.rpush(runs_key(tool_context.invocation_id) + ":attempts", tool_context.attempt)
    finally:
        client.close()
    return {"label": label, "pid": os.getpid(),
            **wait_at_gate(gate_key(tool_context.invocation_id), GATE_TIMEOUT_SECONDS)}


def _fragile_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return types.Part(function_call=types.FunctionCall(name="fragile_step", args={"label": "x"}))
    response = answers[-1].response or {}
    return f"done on {response.get('pid')} released={response.get('released')}"


fragile_app = App(name="fragile", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_fragile_model),
    tools=[LongRunningFunctionTool(fragile_step)]))

async def long_wait(label: str, tool_context: ToolContext) -> dict[str, Any]:
    """An async tool that records its start, then waits 30 s (unless it is stopped)."""
    import asyncio

    client = redis.Redis.from_url(get_settings().redis_url or "", decode_responses=True)
    try:
        client.rpush(runs_key(tool_context.invocation_id), tool_context.function_call_id)
    finally:
        client.close()
    await asyncio.sleep(30)
    return {"label": label, "waited": True}


def _slow_model(request: LlmRequest) -> Any:
    if not function_responses(request):
        return types.Part(function_call=types.FunctionCall(name="long_wait", args={"label": "x"}))
    return "waited"


slow_app = App(name="slow", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_slow_model),
    tools=[LongRunningFunctionTool(long_wait)]))

# -- export_fan: a branch whose long-running tool is pending on one run, done on the next ----

EXPORT_RUNS: dict[str, int] = {}
"""How often :func:`check_export` ran, by invocation id, in this process."""


def check_export(export: str, tool_context: ToolContext) -> dict[str, Any] | None:
    """Start an export and say nothing yet (pending); a later run finds it done.

    An idempotent long-running tool, as a real one would be: two runs of one branch job (a
    copy delivered again while the first ran) differ, the first pausing, the second ending.
    Counted in the process that runs it: the test runs both runs itself.
    """
    runs = EXPORT_RUNS[tool_context.invocation_id] = EXPORT_RUNS.get(tool_context.invocation_id, 0) + 1
    return None if runs == 1 else {"export": export, "done": True}


def _export_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return types.Part(function_call=types.FunctionCall(name="check_export", args={"export": "report"}))
    return f"x heard {answers[-1].response}"


def _export_fan_root() -> Any:
    from orchestrator import ParallelAgent, SequentialAgent

    fan = ParallelAgent(name="fan", sub_agents=[
        LlmAgent(name="x", model=FunctionLlm(record_requests=False, fn=_export_model),
                 tools=[LongRunningFunctionTool(check_export)]),
        LlmAgent(name="y", model=_branch_model("y")),
    ])
    return SequentialAgent(name="pipeline", sub_agents=[
        fan, LlmAgent(name="after", model=FunctionLlm(record_requests=False, fn=_summary_model)),
    ])


export_fan_app = App(name="export_fan", root_agent=_export_fan_root(),
                     resumability_config=ResumabilityConfig(is_resumable=True))

APP_SPECS = ("tests.apps_extra:gated_app,tests.apps_extra:fragile_app,tests.apps_extra:slow_app,"
             "tests.apps_extra:noted_app")
EXPORT_FAN_SPEC = "tests.apps_extra:export_fan_app"
"""Only the lost-job tests load it (its counter is this process's: see :func:`check_export`)."""
