"""A JSON value shaped like kombu's type envelope reaches a tool exactly as it was sent.

kombu's "json" decoder turns any object whose keys are exactly ``__type__`` and ``__value__``
into a Python object (a date, a datetime...) or refuses the whole message (an unknown type).
Such a value may come from a model's arguments, a client's state delta or an earlier event,
and a job carries all three. Our task messages are plain JSON of their own content type
(workers/wire_json.py): here, against a real orchestrator and worker, each such value
reaches the tool unchanged (a dict, the very dict sent), in a tool job's arguments and state
and in a branch job's state and events, and each invocation completes after one run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from google.genai import types

from config import get_settings
from orchestrator import (
    App,
    FunctionTool,
    LlmAgent,
    LlmRequest,
    LongRunningFunctionTool,
    ParallelAgent,
    ResumabilityConfig,
    SequentialAgent,
    ToolContext,
)
from orchestrator.distributed.models import InvocationStatus
from orchestrator.models.fake import FunctionLlm
from tests.apps import function_responses, last_user_text
from tests.support.stacks import Stack as BaseStack
from tests.support.stacks import running_stack

RUNS_KEY = "adk-test:wire:runs"


def _note_run(tool: str, tool_context: ToolContext) -> None:
    client = redis.Redis.from_url(get_settings().redis_url or "", decode_responses=True)
    try:
        client.rpush(RUNS_KEY, f"{tool} {tool_context.invocation_id}")
    finally:
        client.close()


def _seen(value: Any) -> dict[str, Any]:
    """What a tool says it was given: the value itself, its type, its repr."""
    return {"value": value, "type": type(value).__name__, "repr": repr(value)[:200]}


# -- echo: a remote tool that says what it received (arguments and state) --------------------

def echo(data: Any, tool_context: ToolContext) -> dict[str, Any]:
    """Say what was received (a long-running tool: runs on a worker)."""
    _note_run("echo", tool_context)
    return {"data": _seen(data), "note": _seen(tool_context.state.get("note"))}


def _answered(request: LlmRequest) -> bool:
    """Whether the request ends with a function response (this turn's call was answered)."""
    last = request.contents[-1] if request.contents else None
    return bool(last and any(p.function_response for p in last.parts or []))


def _echo_model(request: LlmRequest) -> Any:
    if not _answered(request):
        data = json.loads(last_user_text(request))
        return types.Part(function_call=types.FunctionCall(name="echo", args={"data": data}))
    return "done"


echo_app = App(name="wire_echo", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_echo_model),
    tools=[LongRunningFunctionTool(echo)]))


# -- fan: a branch on a worker reads the history its job carried -------------------------------

def mark(data: Any) -> dict[str, Any]:
    """Note a value (runs in the orchestrator: its call event is the branch's history)."""
    return {"marked": True}


def inspect(tool_context: ToolContext) -> dict[str, Any]:
    """What the branch (on a worker) sees of the earlier call to ``mark`` and of the state."""
    _note_run("inspect", tool_context)
    calls = [c for e in tool_context.session.events for c in e.get_function_calls()
             if c.name == "mark"]
    return {"marked": _seen(calls[-1].args["data"] if calls else None),
            "note": _seen(tool_context.state.get("note"))}


def _first_model(request: LlmRequest) -> Any:
    if not function_responses(request):
        data = json.loads(last_user_text(request))
        return types.Part(function_call=types.FunctionCall(name="mark", args={"data": data}))
    return "marked"


def _branch_model(request: LlmRequest) -> Any:
    if not function_responses(request):
        return types.Part(function_call=types.FunctionCall(name="inspect", args={}))
    return "inspected"


fan_app = App(name="wire_fan", resumability_config=ResumabilityConfig(is_resumable=True),
              root_agent=SequentialAgent(name="pipeline", sub_agents=[
                  LlmAgent(name="first", model=FunctionLlm(record_requests=False, fn=_first_model),
                           tools=[FunctionTool(mark)]),
                  ParallelAgent(name="fan", sub_agents=[LlmAgent(
                      name="b1", model=FunctionLlm(record_requests=False, fn=_branch_model),
                      tools=[FunctionTool(inspect)])]),
              ]))

SPECS = "tests.test_wire_json:echo_app,tests.test_wire_json:fan_app"

ENVELOPES = {
    "date": {"__type__": "date", "__value__": "2020-01-01"},
    "datetime": {"__type__": "datetime", "__value__": "2020-01-01"},
    "unknown": {"__type__": "money", "__value__": "12 EUR"},
    "bytes": {"__type__": "bytes", "__value__": "abc"},
    "nested": {"outer": [1, {"inner": {"__type__": "uuid", "__value__": {"hex": "0" * 32}}}]},
}


@dataclass
class Stack:
    base: BaseStack
    via_celery: Any
    """A client that enqueues by sending Celery's task (the other door)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)


@pytest.fixture(scope="module")
def stack(redis_url: str) -> Iterator[Stack]:
    """Redis db 12, one orchestrator, one worker, a client (and one enqueuing by Celery)."""
    from workers.client import Client

    with running_stack(redis_url, 12, SPECS, "wire") as base:
        via_celery = Client(base.settings, enqueue_via_celery=True)
        base.exit.callback(via_celery.close)
        yield Stack(base, via_celery)


def _finished(s: Stack, app: str, inv: str, sender: Any = None) -> list[Any]:
    """The invocation's function responses, once it completed (``sender``: the client that
    enqueued it, which knows of it before an orchestrator records it)."""
    record = (sender or s.client).wait(app, inv, timeout=20, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, (inv, record.status, record.error)
    return [r.response for e in s.client.events(app, inv) for r in e.get_function_responses()]


def _runs(s: Stack, tool: str, inv: str) -> int:
    return s.check.lrange(RUNS_KEY, 0, -1).count(f"{tool} {inv}")


def test_envelope_shaped_arguments_reach_the_tool_unchanged(stack: Stack):
    s = stack
    invs = {case: s.client.enqueue("wire_echo", f"u-args-{case}", json.dumps(data))
            for case, data in ENVELOPES.items()}
    for case, inv in invs.items():
        [response] = _finished(s, "wire_echo", inv)
        assert response["data"]["value"] == ENVELOPES[case], case
        assert response["data"]["type"] == "dict", (case, response["data"]["repr"])
        assert _runs(s, "echo", inv) == 1, case


@pytest.mark.parametrize("via_celery", [False, True], ids=["redis", "celery"])
def test_envelope_shaped_state_reaches_every_later_remote_call_unchanged(stack: Stack, via_celery):
    s = stack
    sender = s.via_celery if via_celery else s.client
    invs = {case: sender.enqueue("wire_echo", f"u-state-{case}-{via_celery}", "1",
                                 state_delta={"note": note})
            for case, note in ENVELOPES.items()}
    for case, inv in invs.items():
        [response] = _finished(s, "wire_echo", inv, sender)
        assert response["data"]["value"] == 1
        assert response["note"]["value"] == ENVELOPES[case], case
        assert response["note"]["type"] == "dict", (case, response["note"]["repr"])
        # A later invocation of the session carries the note in its job's state too.
        session_id = s.client.status("wire_echo", inv).session_id
        later = s.client.enqueue("wire_echo", f"u-state-{case}-{via_celery}", "2",
                                 session_id=session_id)
        [response] = _finished(s, "wire_echo", later)
        assert response["note"]["value"] == ENVELOPES[case], case
        assert _runs(s, "echo", inv) == _runs(s, "echo", later) == 1, case


def test_envelope_shaped_values_in_a_branch_jobs_events_and_state_reach_it_unchanged(stack: Stack):
    s = stack
    invs = {case: s.client.enqueue("wire_fan", f"u-fan-{case}", json.dumps(data),
                                   state_delta={"note": data})
            for case, data in ENVELOPES.items()}
    for case, inv in invs.items():
        responses = _finished(s, "wire_fan", inv)
        [seen] = [r for r in responses if "marked" in r and isinstance(r["marked"], dict)]
        assert seen["marked"]["value"] == ENVELOPES[case], case
        assert seen["marked"]["type"] == "dict", (case, seen["marked"]["repr"])
        assert seen["note"]["value"] == ENVELOPES[case], case
        assert seen["note"]["type"] == "dict", (case, seen["note"]["repr"])
        assert _runs(s, "inspect", inv) == 1, case


# ---- progress reports on Celery's channels (workers/progress.py) ---------------------------


def test_a_progress_report_reaches_celerys_channels_as_kombu_will_read_it():
    from workers.progress import for_celery

    envelope = {"__type__": "nope", "__value__": 1}
    # Plain reports pass as they are, keys JSON would turn into strings included.
    assert for_celery({"pages": {1: "done"}}) == {"pages": {1: "done"}}
    assert for_celery({"note": "__type__"}) == {"note": "__type__"}
    # An envelope anywhere JSON puts one (a tuple is a list there) is replaced by a note.
    for report, where in [({"rows": (envelope,)}, "progress.rows[0]"),
                          ({"deep": [{"x": envelope}]}, "progress.deep[0].x"),
                          (envelope, "progress")]:
        shown = for_celery(report)
        assert list(shown) == ["not_shown"] and shown["not_shown"].startswith(f"{where} is "), \
            (report, shown)
