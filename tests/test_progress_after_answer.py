"""Progress reported once a call is answered, or its invocation cancelled, is dropped.

A tool may leave a thread behind that calls ``tool_context.report_progress`` after the tool
returned (its result stored, its answer committed) or after the invocation was cancelled.
Followers (``Client.follow``, SSE, ``adk-celery follow``) must never see a ``progress`` item
of a call after its function response, nor one of a cancelled invocation. Real orchestrator
and worker processes; the leftover thread waits on a Redis list the test pushes to, and says
when it has reported on another, so the test awaits each step.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from google.genai import types

from config import get_settings
from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.backends.redis import keys
from orchestrator.distributed.models import InvocationStatus
from orchestrator.models.fake import FunctionLlm
from tests.apps import function_responses, last_user_text
from tests.support.stacks import Stack, running_stack


def gate_key(invocation_id: str) -> str:
    return f"adk-test:late:gate:{invocation_id}"


def marks_key(invocation_id: str) -> str:
    return f"adk-test:late:marks:{invocation_id}"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(get_settings().redis_url or "", decode_responses=True)


def _report_when_told(tool_context: ToolContext) -> None:
    """Wait for the test's go, report progress, then say so (on a thread of its own)."""
    client = _redis()
    try:
        client.rpush(marks_key(tool_context.invocation_id), "started")
        client.blpop([gate_key(tool_context.invocation_id)], timeout=60)
        try:
            tool_context.report_progress({"late": True})
            outcome = "reported"
        except Exception as error:  # noqa: BLE001 - the test reads what happened
            outcome = f"error {type(error).__name__}"
        client.rpush(marks_key(tool_context.invocation_id), outcome)
    finally:
        client.close()


def leaky(tool_context: ToolContext) -> dict[str, Any]:
    """Return at once, leaving a thread that reports progress when the test says so."""
    threading.Thread(target=_report_when_told, args=(tool_context,), daemon=True).start()
    return {"ok": True}


def blocked(tool_context: ToolContext) -> dict[str, Any]:
    """Report progress when the test says so (after it cancelled the invocation), then return."""
    _report_when_told(tool_context)
    return {"ok": True}


def gate(tool_context: ToolContext) -> None:
    """Wait for an answer from outside (keeps the invocation open after ``leaky``'s answer)."""
    return None


def _model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        name = last_user_text(request) or "leaky"
        return types.Part(function_call=types.FunctionCall(name=name, args={}))
    if len(answers) == 1 and answers[0].name == "leaky":
        return types.Part(function_call=types.FunctionCall(name="gate", args={}))
    return "done"


late_app = App(name="late", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_model),
    tools=[LongRunningFunctionTool(leaky), LongRunningFunctionTool(blocked),
           LongRunningFunctionTool(gate)]))

SPECS = "tests.test_progress_after_answer:late_app"


@pytest.fixture(scope="module")
def stack(redis_url: str) -> Iterator[Stack]:
    """Redis db 11, one orchestrator, one worker, a client."""
    with running_stack(redis_url, 11, SPECS, "late") as running:
        yield running


def _next_mark(s: Stack, inv: str) -> str:
    popped = s.check.blpop([marks_key(inv)], timeout=30)
    assert popped is not None, f"the tool of {inv} gave no sign"
    return popped[1]


def test_progress_reported_after_the_calls_answer_never_reaches_the_live_stream(stack: Stack):
    s = stack
    inv = s.client.enqueue("late", "u-answered", "leaky")
    gate_call = next(c.id for item in s.client.follow("late", inv, timeout=20,
                                                       until=InvocationStatus.FINISHED)
                     if item.kind == "event" and item.event is not None
                     for c in item.event.get_function_calls() if c.name == "gate")
    # `leaky` is answered (its response comes before the call to `gate`); now its thread reports.
    assert _next_mark(s, inv) == "started"
    s.check.rpush(gate_key(inv), "go")
    assert _next_mark(s, inv) == "reported"  # report_progress returned (nothing written)

    s.client.answer("late", inv, gate_call, {"opened": True})
    record = s.client.wait("late", inv, timeout=20, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record

    answered: set[str] = set()
    late: list[Any] = []
    for item in s.client.follow("late", inv, timeout=20, until=InvocationStatus.FINISHED):
        if item.kind == "event" and item.event is not None:
            answered |= {r.id for r in item.event.get_function_responses() if r.id}
        elif item.kind == "progress" and item.progress is not None:
            if item.progress.function_call_id in answered:
                late.append(item.progress)
    assert answered and not late, late


def test_progress_reported_after_a_cancel_is_not_written(stack: Stack):
    s = stack
    inv = s.client.enqueue("late", "u-cancelled", "blocked")
    assert _next_mark(s, inv) == "started"  # the tool runs, waiting for the go
    s.client.cancel("late", inv)
    record = s.client.wait("late", inv, timeout=20, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.CANCELLED, record
    s.check.rpush(gate_key(inv), "go")
    assert _next_mark(s, inv) == "reported"

    # The stream and the call's status are what followers and `calls` read.
    entries = s.check.xrange(keys.invocation_stream("late", inv))
    assert [fields for _, fields in entries if fields.get("kind") == "progress"] == []
    journal = s.check.hgetall(keys.invocation_jobs("late", inv))
    assert not [field for field in journal if field.startswith("p:")], journal
