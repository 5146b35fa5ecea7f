"""ParallelAgent apps for the paths of distributed branches past the plain fan-out.

``two_ask``: both branches wait for an outside answer; ``branch_hold``: one branch's call is
confirmed and then left to an outside answer while the other branch goes on; ``loop_fan``:
a LoopAgent around the ParallelAgent (its branches run on every pass); ``loop_exit``: a
branch escalates (``exit_loop``) out of that loop; ``fail_wait``: one branch fails while its
sibling waits for an outside answer. Importable by worker subprocesses; the models are
stateless functions of the request.
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from orchestrator import (
    App,
    LlmAgent,
    LlmRequest,
    LongRunningFunctionTool,
    LoopAgent,
    ParallelAgent,
    ResumabilityConfig,
    SequentialAgent,
    ToolContext,
)
from orchestrator.models.fake import FunctionLlm
from orchestrator.tools.exit_loop_tool import exit_loop
from tests.apps import function_responses
from tests.apps_confirm import note_run


def _call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def _text(text: str) -> FunctionLlm:
    return FunctionLlm(record_requests=False, fn=lambda request: text)


def _resumable(name: str, root: Any) -> App:
    return App(name=name, root_agent=root, resumability_config=ResumabilityConfig(is_resumable=True))


def ask(question: str) -> None:
    """Ask a human (the answer comes from outside)."""
    return None


def _asking(request: LlmRequest) -> Any:
    answers = function_responses(request)
    return _call("ask", question="?") if not answers else f"heard {answers[-1].response}"


def _asker(name: str) -> LlmAgent:
    return LlmAgent(name=name, model=FunctionLlm(record_requests=False, fn=_asking),
                    tools=[LongRunningFunctionTool(ask)])


two_ask_app = _resumable("two_ask", SequentialAgent(name="pipeline", sub_agents=[
    ParallelAgent(name="fan", sub_agents=[_asker("x1"), _asker("x2")]),
    LlmAgent(name="after", model=_text("summary")),
]))


# -- branch_hold ------------------------------------------------------------------------------

def hold(amount: int, tool_context: ToolContext) -> None:
    """Place a hold that a human settles later (confirmed first)."""
    note_run(tool_context.invocation_id, "hold")
    return None


def look(key: str) -> dict[str, Any]:
    """Look a key up (a remote tool)."""
    return {"value": key}


def _holding(request: LlmRequest) -> Any:
    answers = function_responses(request)
    return _call("hold", amount=1) if not answers else f"held {answers[-1].response}"


def _asking_then_looking(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return _call("ask", question="?")
    if len(answers) == 1:
        return _call("look", key="z")
    return f"looked {answers[-1].response}"


branch_hold_app = _resumable("branch_hold", ParallelAgent(name="fan", sub_agents=[
    LlmAgent(name="asker", model=FunctionLlm(record_requests=False, fn=_asking_then_looking),
             tools=[LongRunningFunctionTool(ask), LongRunningFunctionTool(look)]),
    LlmAgent(name="holder", model=FunctionLlm(record_requests=False, fn=_holding),
             tools=[LongRunningFunctionTool(hold, require_confirmation=True)]),
]))


# -- loop_fan, loop_exit, fail_wait --------------------------------------------------------------

def _exiting(request: LlmRequest) -> Any:
    return _call("exit_loop") if not function_responses(request) else "a done"


loop_fan_app = _resumable("loop_fan", LoopAgent(name="loop", max_iterations=2, sub_agents=[
    ParallelAgent(name="fan", sub_agents=[LlmAgent(name="a", model=_text("a said")),
                                          LlmAgent(name="b", model=_text("b said"))]),
]))

loop_exit_app = _resumable("loop_exit", LoopAgent(name="loop", max_iterations=4, sub_agents=[
    ParallelAgent(name="fan", sub_agents=[
        LlmAgent(name="a", model=FunctionLlm(record_requests=False, fn=_exiting), tools=[exit_loop]),
        LlmAgent(name="b", model=_text("b done")),
    ]),
]))


def _exploding(request: LlmRequest) -> Any:
    raise RuntimeError("the branch's model exploded")


fail_wait_app = _resumable("fail_wait", ParallelAgent(name="fan", sub_agents=[
    _asker("x"), LlmAgent(name="boom", model=FunctionLlm(record_requests=False, fn=_exploding)),
]))


def quick_ask(question: str) -> dict[str, Any]:
    """A long-running tool that has its answer at once (it needs no human this time)."""
    return {"answer": f"known: {question}"}


def _asking_quickly(request: LlmRequest) -> Any:
    answers = function_responses(request)
    return _call("quick_ask", question="?") if not answers else f"got {answers[-1].response}"


quick_fan_app = _resumable("quick_fan", ParallelAgent(name="fan", sub_agents=[
    LlmAgent(name="q", model=FunctionLlm(record_requests=False, fn=_asking_quickly),
             tools=[LongRunningFunctionTool(quick_ask)]),
    LlmAgent(name="r", model=_text("r done")),
]))
"""A branch whose long-running tool answers at once: the branch ends, it does not pause."""


BRANCH_APPS = [two_ask_app, branch_hold_app, loop_fan_app, loop_exit_app, fail_wait_app,
               quick_fan_app]
BRANCH_APP_SPECS = ",".join(
    f"tests.apps_branches:{name}" for name in
    ("two_ask_app", "branch_hold_app", "loop_fan_app", "loop_exit_app", "fail_wait_app",
     "quick_fan_app"))
