"""Apps for bench/chaos.py: deterministic models, remote tools that log every run in Redis.

Every model is a stateless function of the request (``FunctionLlm``), so an orchestrator
that takes an invocation over from a dead one asks for the same calls and writes the same
answer. A user message is ``"chaos <tag>"``; the final text of each app is a function of
the tag only (:func:`expected_final_text`), so the bench can tell a right answer from a
wrong or missing one.

- ``chaos_one``: the model calls the long-running tool ``chaos_tool`` once, then answers
  ``done <tag>: <tag>``.

The calls are made from the latest user message (the invocation's own: it is the last thing
in the session when an invocation starts); the answers are made from what came back (the
tools echo their tag), never from the latest user message: while an invocation is paused
another one of the same session may start, and its message is then in the history.
- ``chaos_two``: one model turn with two calls at once (``chaos_tool`` for ``<tag>/a`` and
  ``<tag>/b``), then ``done <tag>: <tag>/a,<tag>/b``.
- ``chaos_fan``: a resumable App, ``SequentialAgent[ParallelAgent[ba, bb, bc], after]``: each
  branch runs as a job on a worker and calls ``chaos_branch_tool`` there, then says
  ``<branch> done <tag>/<branch>``; ``after`` answers ``summary <tag>: ba,bb,bc`` (the
  branches it saw).

Both tools first record the run in the hash :data:`RUNS_KEY` (a fresh run id -> JSON
``{"kind", "invocation_id", "function_call_id", "agent", "tag", "pid", "t"}``), then sleep
a random 50-800 ms. A call of
``chaos_tool`` keeps its id when its job runs again; a branch that runs again makes a new
model call (a new call id), so the bench keys branch-tool runs by (invocation, agent).
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
import uuid
from typing import Any

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
from orchestrator.models.fake import FunctionLlm

RUNS_KEY = "chaos:runs"
"""Redis hash of every tool run: a fresh run id -> JSON, written by the tools, read by the bench.

A hash rather than a list so that a write retried after a lost reply (Redis killed after
applying it, or redis-py's own retry) is still recorded once."""
MESSAGE_PREFIX = "chaos "
BRANCHES = ("ba", "bb", "bc")
SLEEP_RANGE = (0.05, 0.8)
"""Seconds a tool sleeps (uniformly random): long enough for kills to land mid-call."""
RECORD_RETRY_SECONDS = 60.0
"""How long a tool keeps retrying its run record while Redis is down (then it raises)."""

APP_ONE, APP_TWO, APP_FAN = "chaos_one", "chaos_two", "chaos_fan"
APP_NAMES = (APP_ONE, APP_TWO, APP_FAN)


def expected_final_text(app_name: str, tag: str) -> str:
    """The final answer a correct run of ``app_name`` gives for the message ``chaos <tag>``."""
    if app_name == APP_ONE:
        return f"done {tag}: {tag}"
    if app_name == APP_TWO:
        return f"done {tag}: {tag}/a,{tag}/b"
    return f"summary {tag}: " + ",".join(BRANCHES)


# -- run records ------------------------------------------------------------------------------

_client_lock = threading.Lock()
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    with _client_lock:
        if _client is None:
            _client = redis.Redis.from_url(get_settings().redis_url or "", socket_timeout=5,
                                           socket_connect_timeout=2)
        return _client


def _record_run(kind: str, tool_context: ToolContext, tag: str) -> None:
    """Record this run in :data:`RUNS_KEY`, retrying through a Redis restart (bounded)."""
    run_id = uuid.uuid4().hex
    line = json.dumps({
        "kind": kind, "invocation_id": tool_context.invocation_id,
        "function_call_id": tool_context.function_call_id, "agent": tool_context.agent_name,
        "tag": tag, "pid": os.getpid(), "t": time.time(),
    })
    deadline = time.monotonic() + RECORD_RETRY_SECONDS
    while True:
        try:
            _redis().hset(RUNS_KEY, run_id, line)
            return
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def chaos_tool(tag: str, tool_context: ToolContext) -> dict[str, Any]:
    """Long-running remote tool: log the run, wait a little, echo the tag."""
    _record_run("tool", tool_context, tag)
    time.sleep(random.uniform(*SLEEP_RANGE))
    return {"tag": tag, "pid": os.getpid()}


def chaos_branch_tool(tag: str, tool_context: ToolContext) -> dict[str, Any]:
    """Tool of a parallel branch (runs inside the branch's job on a worker)."""
    _record_run("branch", tool_context, tag)
    time.sleep(random.uniform(*SLEEP_RANGE))
    return {"tag": tag, "pid": os.getpid()}


# -- models: functions of the request ----------------------------------------------------------

def _call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def _texts(content: types.Content) -> list[str]:
    return [p.text for p in content.parts or [] if p.text]


def _latest_tag(request: LlmRequest) -> tuple[int, str]:
    """Index of the latest user message ``chaos <tag>`` in the request, and its tag."""
    for index in range(len(request.contents) - 1, -1, -1):
        content = request.contents[index]
        if content.role != "user":
            continue
        for text in _texts(content):
            if text.startswith(MESSAGE_PREFIX):
                return index, text[len(MESSAGE_PREFIX):].strip()
    return -1, "none"


def _last_responses(request: LlmRequest) -> list[types.FunctionResponse]:
    """The function responses in the request's last content (the answers just received)."""
    if not request.contents:
        return []
    return [p.function_response for p in request.contents[-1].parts or [] if p.function_response]


def _answered_tags(responses: list[types.FunctionResponse]) -> list[str]:
    return sorted(str((r.response or {}).get("tag")) for r in responses)


def _one_model(request: LlmRequest) -> Any:
    if responses := _last_responses(request):
        tags = _answered_tags(responses)
        return f"done {tags[0]}: {','.join(tags)}"
    return _call("chaos_tool", tag=_latest_tag(request)[1])


def _two_model(request: LlmRequest) -> Any:
    if responses := _last_responses(request):
        tags = _answered_tags(responses)
        return f"done {tags[0].rsplit('/', 1)[0]}: {','.join(tags)}"
    tag = _latest_tag(request)[1]
    return [_call("chaos_tool", tag=f"{tag}/a"), _call("chaos_tool", tag=f"{tag}/b")]


def _branch_model(branch: str) -> FunctionLlm:
    def answer(request: LlmRequest) -> Any:
        if responses := _last_responses(request):
            return f"{branch} done {','.join(_answered_tags(responses))}"
        return _call("chaos_branch_tool", tag=f"{_latest_tag(request)[1]}/{branch}")
    return FunctionLlm(fn=answer, record_requests=False)


_BRANCH_TEXT = re.compile(r"\b(" + "|".join(BRANCHES) + r") done (\S+)/(" + "|".join(BRANCHES) + r")\b")


def _after_model(request: LlmRequest) -> Any:
    """Summarise the branches of the latest fan-out: its tag is the one of the last branch text.

    Not the latest user message: another invocation of the session may have started while
    this one was paused on its branches, and its message is then in the history too.
    """
    found = [m for c in request.contents for t in _texts(c) for m in _BRANCH_TEXT.finditer(t)]
    if not found:
        return "summary none: "
    tag = found[-1].group(2)
    seen = sorted({m.group(1) for m in found if m.group(2) == tag and m.group(1) == m.group(3)})
    return f"summary {tag}: " + ",".join(seen)


one_app = App(name=APP_ONE, root_agent=LlmAgent(
    name="agent", model=FunctionLlm(fn=_one_model, record_requests=False),
    tools=[LongRunningFunctionTool(chaos_tool)]))

two_app = App(name=APP_TWO, root_agent=LlmAgent(
    name="agent", model=FunctionLlm(fn=_two_model, record_requests=False),
    tools=[LongRunningFunctionTool(chaos_tool)]))

fan_app = App(
    name=APP_FAN,
    root_agent=SequentialAgent(name="pipeline", sub_agents=[
        ParallelAgent(name="fan", sub_agents=[
            LlmAgent(name=b, model=_branch_model(b), tools=[FunctionTool(chaos_branch_tool)])
            for b in BRANCHES
        ]),
        LlmAgent(name="after", model=FunctionLlm(fn=_after_model, record_requests=False)),
    ]),
    resumability_config=ResumabilityConfig(is_resumable=True),
)

APP_SPECS = "bench._chaos_apps:one_app,bench._chaos_apps:two_app,bench._chaos_apps:fan_app"
