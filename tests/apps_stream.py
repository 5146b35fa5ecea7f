"""Apps for the live event stream tests; importable by orchestrator and worker subprocesses.

Their models stream: each answer is ``Chunks`` (partial chunks, then the aggregate), so an
invocation enqueued with ``streaming`` publishes partial events before each committed one.
Models are stateless functions of the request, like tests/apps.py.

- ``stream_chat``: one streamed text answer.
- ``stream_gated``: a streamed answer whose aggregate calls ``gated_step`` (a remote
  long-running tool that blocks until the test pushes to the invocation's :func:`gate_key`
  list, BLPOP with a bounded timeout), then a streamed final answer.
- ``stream_approval``: a long-running call answered from outside (the invocation pauses).
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.models.fake import Chunks, FunctionLlm
from tests.apps import function_responses, last_user_text
from tests.apps_extra import wait_at_gate

GATE_TIMEOUT_SECONDS = 20
"""The longest a gated tool waits for its release before answering ``released: False``."""


def gate_key(invocation_id: str) -> str:
    """The Redis list the gated tool of ``invocation_id`` waits on."""
    return f"adk-test:stream-gate:{invocation_id}"


def gated_step(label: str, tool_context: ToolContext) -> dict[str, Any]:
    """Wait (on a worker) until the test releases this invocation's gate."""
    return {"label": label, **wait_at_gate(gate_key(tool_context.invocation_id), GATE_TIMEOUT_SECONDS)}


def _chat_model(request: LlmRequest) -> Any:
    text = last_user_text(request)
    return Chunks(["echo: ", text, f"echo: {text}"])


stream_chat_app = App(name="stream_chat", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_chat_model)))


def _gated_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        label = last_user_text(request).split()[-1]
        call = types.Part(function_call=types.FunctionCall(name="gated_step", args={"label": label}))
        return Chunks(["Opening ", "the gate", [types.Part(text="Opening the gate"), call]])
    response = answers[-1].response or {}
    final = f"gated {response.get('label')} released={response.get('released')} by {response.get('gate')}"
    return Chunks(["gate ", "passed", final])


stream_gated_app = App(name="stream_gated", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_gated_model),
    tools=[LongRunningFunctionTool(gated_step)]))


def request_approval(amount: int) -> None:
    """Ask a human to approve a payment; the answer comes later."""
    return None


def _approval_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return types.Part(function_call=types.FunctionCall(name="request_approval", args={"amount": 5}))
    return f"approved: {answers[-1].response}"


stream_approval_app = App(name="stream_approval", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_approval_model),
    tools=[LongRunningFunctionTool(request_approval)]))


STREAM_APPS = [stream_chat_app, stream_gated_app, stream_approval_app]
APP_SPECS = ",".join(
    f"tests.apps_stream:{name}"
    for name in ("stream_chat_app", "stream_gated_app", "stream_approval_app")
)
