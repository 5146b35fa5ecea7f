"""Apps whose remote tools need a confirmation; importable by worker subprocesses.

Every tool run is noted (:func:`note_run`) with whether it ran confirmed, so a test can tell
that a tool never ran unconfirmed, and ran once. ``guarded``: a ``LongRunningFunctionTool``
with ``require_confirmation=True``; ``guarded_pair``: two of its calls in one model turn;
``safe``: a tool with its own confirmation rule whose ``run_async`` never checks it (only
the flow's confirmation gate keeps it from running unconfirmed on a worker);
``branch_confirm``: a ParallelAgent branch whose call waits for a confirmation;
``fickle``, ``guarded_mixed``, ``guarded_final``, ``branch_routed``: see each. The models are stateless
functions of the request, like tests/apps.py's.
"""

from __future__ import annotations

import os
from typing import Any

from google.genai import types

from config import Settings
from orchestrator import (
    App,
    BaseTool,
    FunctionTool,
    LlmAgent,
    LlmRequest,
    LongRunningFunctionTool,
    ParallelAgent,
    ResumabilityConfig,
    SequentialAgent,
    ToolContext,
)
from orchestrator.distributed.transport import QUEUE_METADATA_KEY
from orchestrator.models.fake import FunctionLlm
from tests.apps import function_responses

_RUNS: dict[str, list[str]] = {}
"""Tool runs noted in this process (:func:`note_run` without Redis), by tag."""


def note_run(tag: str, what: str) -> None:
    """Note a tool run under ``tag`` as ``<what>:<pid>``: in Redis (list ``test:runs:<tag>``)
    where the process has one (a worker), else in this process (the embedded back-end)."""
    url = os.environ.get("ADK_CELERY_REDIS_URL")
    if url is None:
        _RUNS.setdefault(tag, []).append(f"{what}:{os.getpid()}")
        return
    import redis

    with redis.Redis.from_url(url) as client:
        client.rpush(f"test:runs:{tag}", f"{what}:{os.getpid()}")


def noted_runs(tag: str, redis_url: str | None = None) -> list[tuple[str, int]]:
    """The runs noted under ``tag`` as (what, pid), oldest first (in the Redis at
    ``redis_url`` if given, else in this process)."""
    if redis_url is None:
        noted = list(_RUNS.get(tag, []))
    else:
        import redis

        with redis.Redis.from_url(redis_url, decode_responses=True) as client:
            noted = client.lrange(f"test:runs:{tag}", 0, -1)
    return [(what, int(pid)) for what, _, pid in (entry.rpartition(":") for entry in noted)]


def _confirmed(tool_context: ToolContext) -> str:
    confirmation = tool_context.tool_confirmation
    return "confirmed" if confirmation is not None and confirmation.confirmed else "unconfirmed"


def _call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def _agent(fn: Any, tool: BaseTool, name: str = "agent") -> LlmAgent:
    return LlmAgent(name=name, model=FunctionLlm(record_requests=False, fn=fn), tools=[tool])


# -- guarded, guarded_pair ------------------------------------------------------------------

def pay_out(amount: int, tool_context: ToolContext) -> dict[str, Any]:
    """Pay an amount out; a human confirms each payment first."""
    note_run(tool_context.invocation_id, _confirmed(tool_context))
    return {"paid": amount}


def _paying() -> LongRunningFunctionTool:
    return LongRunningFunctionTool(pay_out, require_confirmation=True)


def _guarded_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return _call("pay_out", amount=10)
    return f"payout: {answers[-1].response}"


def _guarded_pair_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return [_call("pay_out", amount=10), _call("pay_out", amount=20)]
    return "payouts: " + ", ".join(str(a.response) for a in answers)


guarded_app = App(name="guarded", root_agent=_agent(_guarded_model, _paying()))
guarded_pair_app = App(name="guarded_pair", root_agent=_agent(_guarded_pair_model, _paying()))


# -- safe -------------------------------------------------------------------------------------

class OpenSafe(BaseTool):
    """Runs whether confirmed or not: only the flow's confirmation gate keeps it from running
    unconfirmed (google-adk's ``FunctionTool.run_async`` checks its rule itself; this does not)."""

    def __init__(self) -> None:
        super().__init__(name="open_safe", description="Open the safe.", is_long_running=True)

    def _get_declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration(name=self.name, description=self.description,
                                         parameters_json_schema={"type": "object"})

    async def check_require_confirmation(self, args: dict[str, Any], tool_context: ToolContext) -> bool:
        return True

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        note_run(tool_context.invocation_id, _confirmed(tool_context))
        return {"opened": _confirmed(tool_context)}


def _safe_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return _call("open_safe")
    return f"safe: {answers[-1].response}"


safe_app = App(name="safe", root_agent=_agent(_safe_model, OpenSafe()))


class FickleSafe(OpenSafe):
    """``open_safe`` whose rule wants a confirmation only the first time it is asked about a
    call: a flow that asks twice would let the call run unconfirmed."""

    def __init__(self) -> None:
        super().__init__()
        self._asked: set[str | None] = set()

    async def check_require_confirmation(self, args: dict[str, Any], tool_context: ToolContext) -> bool:
        first = tool_context.function_call_id not in self._asked
        self._asked.add(tool_context.function_call_id)
        return first


fickle_app = App(name="fickle", root_agent=_agent(_safe_model, FickleSafe()))


# -- branch_confirm ---------------------------------------------------------------------------

def _text(text: str) -> FunctionLlm:
    return FunctionLlm(record_requests=False, fn=lambda request: text)


branch_confirm_app = App(
    name="branch_confirm",
    root_agent=SequentialAgent(name="pipeline", sub_agents=[
        ParallelAgent(name="fan", sub_agents=[
            _agent(_guarded_model, _paying(), name="x"), LlmAgent(name="y", model=_text("y done")),
        ]),
        LlmAgent(name="after", model=_text("summary")),
    ]),
    resumability_config=ResumabilityConfig(is_resumable=True),
)


# -- guarded_mixed, guarded_final -------------------------------------------------------------

def jot(text: str) -> dict[str, Any]:
    """Jot a note down (a plain tool: it runs at once, no confirmation)."""
    return {"noted": text}


def finish(tool_context: ToolContext) -> dict[str, Any]:
    """Close the case; its answer ends the turn (no summary by the model)."""
    note_run(f"finish:{tool_context.invocation_id}", _confirmed(tool_context))
    tool_context.actions.skip_summarization = True
    return {"finished": True}


def _mixed_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return [_call("pay_out", amount=10), _call("jot", text="hi")]
    return f"mixed: {[a.response for a in answers if a.name == 'pay_out'][-1]}"


def _final_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return [_call("pay_out", amount=10), _call("finish")]
    return f"a: {answers[-1].response}"


guarded_mixed_app = App(name="guarded_mixed", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_mixed_model),
    tools=[_paying(), FunctionTool(jot)]))
"""A call held for its confirmation beside a plain one, in one turn: the gate's answer comes
first (with the plain answer), then the confirmation request."""

def _final_app(name: str, paying: LongRunningFunctionTool) -> App:
    return App(
        name=name,
        root_agent=SequentialAgent(name="pipeline", sub_agents=[
            LlmAgent(name="a", model=FunctionLlm(record_requests=False, fn=_final_model),
                     tools=[paying, FunctionTool(finish, require_confirmation=True)]),
            LlmAgent(name="b", model=_text("b ran")),
        ]),
        resumability_config=ResumabilityConfig(is_resumable=True),
    )


guarded_final_app = _final_app("guarded_final", _paying())
"""Two held calls of one turn: once both are approved, ``finish`` (here) ends the turn while
``pay_out`` runs where remote tools run."""


# -- branch_routed ----------------------------------------------------------------------------

def wire(amount: int, tool_context: ToolContext) -> dict[str, Any]:
    """Wire an amount (a plain tool that needs a confirmation)."""
    note_run(tool_context.invocation_id, _confirmed(tool_context))
    return {"wired": amount}


def _wire_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return _call("wire", amount=5)
    return f"x: {answers[-1].response}"


def _wiring() -> FunctionTool:
    tool = FunctionTool(wire, require_confirmation=True)
    tool.custom_metadata = {QUEUE_METADATA_KEY: Settings.model_fields["tools_queue"].default}
    return tool


branch_routed_app = App(
    name="branch_routed",
    root_agent=SequentialAgent(name="pipeline", sub_agents=[
        ParallelAgent(name="fan", sub_agents=[
            LlmAgent(name="x", model=FunctionLlm(record_requests=False, fn=_wire_model),
                     tools=[_wiring()]),
            LlmAgent(name="y", model=_text("y done")),
        ]),
        LlmAgent(name="after", model=_text("summary")),
    ]),
    resumability_config=ResumabilityConfig(is_resumable=True),
)
"""A branch's plain tool that needs a confirmation, routed to the tools queue by its
metadata: the branch runs where no transport routes it (a worker), the approved call is run
where one does (the orchestrator goes on with the branch)."""


CONFIRM_APPS = [guarded_app, guarded_pair_app, safe_app, fickle_app, branch_confirm_app,
                guarded_mixed_app, guarded_final_app, branch_routed_app]
CONFIRM_APP_SPECS = ",".join(
    f"tests.apps_confirm:{name}" for name in
    ("guarded_app", "guarded_pair_app", "safe_app", "fickle_app", "branch_confirm_app",
     "guarded_mixed_app", "guarded_final_app", "branch_routed_app"))
