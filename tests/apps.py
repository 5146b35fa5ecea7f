"""Apps used by the integration tests; importable by orchestrator and worker subprocesses.

Their models are stateless functions of the request, so any orchestrator process answers
the same way (a scripted model's position would differ between processes).
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from google.genai import types

from orchestrator import (
    App,
    CallbackContext,
    FunctionTool,
    LlmAgent,
    LlmRequest,
    LongRunningFunctionTool,
    ToolContext,
)
from orchestrator.distributed.transport import QUEUE_METADATA_KEY
from orchestrator.models.fake import FunctionLlm


def _call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def function_responses(request: LlmRequest) -> list[types.FunctionResponse]:
    """Every function response in the request's history, oldest first."""
    return [p.function_response for c in request.contents for p in c.parts or []
            if p.function_response]


def last_user_text(request: LlmRequest) -> str:
    """The text of the user's latest text message ('' if none)."""
    texts = [p.text for c in request.contents if c.role == "user" for p in c.parts or [] if p.text]
    return texts[-1] if texts else ""


# -- lookup: one remote long-running tool, answered by a worker ---------------------------

def slow_lookup(city: str, tool_context: ToolContext) -> dict[str, Any]:
    """Look a city up (long-running: runs on a worker)."""
    tool_context.report_progress({"step": "looking", "city": city})
    tool_context.state["looked_up"] = city
    return {"city": city, "found": True, "pid": os.getpid()}


def _lookup_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return _call("slow_lookup", city=last_user_text(request).split()[-1])
    return f"{answers[-1].response.get('city')} found by pid {answers[-1].response.get('pid')}"


lookup_app = App(name="lookup", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_lookup_model),
    tools=[LongRunningFunctionTool(slow_lookup)]))


# -- fanout: two remote calls in one model turn ---------------------------------------------

def _one_turn_calls_app(name: str, tool: Any, arg: str, values: tuple[str, ...], prefix: str) -> App:
    """An app whose model calls ``tool`` once per value in one turn, then lists the answers."""

    def model(request: LlmRequest) -> Any:
        answers = function_responses(request)
        if not answers:
            return [_call(tool.__name__, **{arg: value}) for value in values]
        return prefix + ", ".join(sorted(str(a.response.get(arg)) for a in answers))

    return App(name=name, root_agent=LlmAgent(
        name="agent", model=FunctionLlm(record_requests=False, fn=model),
        tools=[LongRunningFunctionTool(tool)]))


fanout_app = _one_turn_calls_app("fanout", slow_lookup, "city", ("Oslo", "Rome"), "both: ")


# -- approval: a long-running call answered from outside ------------------------------------

def request_approval(amount: int) -> None:
    """Ask a human to approve a payment; the answer comes later."""
    return None


def _approval_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return _call("request_approval", amount=100)
    return f"approval: {answers[-1].response}"


approval_app = App(name="approval", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_approval_model),
    tools=[LongRunningFunctionTool(request_approval)]))


def _two_approvals_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return [_call("request_approval", amount=100), _call("request_approval", amount=200)]
    return f"approvals: {sorted(str(a.response) for a in answers)}"


two_approvals_app = App(name="two_approvals", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_two_approvals_model),
    tools=[LongRunningFunctionTool(request_approval)]))
"""Two calls answered from outside in one turn: the invocation goes on once both are in."""


def _temp_model(request: LlmRequest) -> Any:
    instruction = str(request.config.system_instruction or "")
    key = instruction.split("key=", 1)[-1].split("\n", 1)[0]
    return f"the key has {len(key)} characters"


temp_key_app = App(name="temp_key", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_temp_model),
    instruction="key={temp:key?}"))
"""Reads a ``temp:`` value sent with the enqueue (its length only, so the log never holds it)."""


# -- exploding: a remote tool that raises ----------------------------------------------------

def exploding(x: int) -> dict[str, Any]:
    """Always raises."""
    raise RuntimeError(f"tool blew up on {x}")


def _exploding_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return _call("exploding", x=7)
    return f"model saw: {answers[-1].response}"


exploding_app = App(name="exploding", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_exploding_model),
    tools=[LongRunningFunctionTool(exploding)]))


# -- chat: plain replies, to check ordering of messages to one session --------------------

def _chat_model(request: LlmRequest) -> Any:
    return f"reply to {last_user_text(request)}"


chat_app = App(name="chat", root_agent=LlmAgent(name="agent", model=FunctionLlm(record_requests=False, fn=_chat_model)))


def _steps_chat_root() -> Any:
    from orchestrator import SequentialAgent

    return SequentialAgent(name="steps", sub_agents=[
        LlmAgent(name=name, model=FunctionLlm(record_requests=False, fn=lambda r, n=name: f"{n} done"))
        for name in ("first", "second")])


steps_chat_app = App(name="steps_chat", root_agent=_steps_chat_root())
"""Not resumable, a workflow root, no tools: two agents reply in turn. Not in ALL_APPS."""


# -- rendezvous: two sync calls of one turn that only finish if they run at the same time ---

_meeting = threading.Barrier(2, timeout=10)


def meet(who: str) -> dict[str, Any]:
    """Wait (blocking) for the other caller; BrokenBarrierError if it never comes."""
    _meeting.wait()
    return {"who": who, "met": True, "thread": threading.get_ident(), "pid": os.getpid()}


rendezvous_app = _one_turn_calls_app("rendezvous", meet, "who", ("a", "b"), "met: ")


# -- loopbound: async calls through a client tied to the event loop that first used it ----


class _LoopBoundClient:
    """Like an async HTTP client's connection pool: usable only on the loop that opened it."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    async def fetch(self, key: str) -> str:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError("this client is bound to a different event loop")
        await asyncio.sleep(0.2)  # the request itself; long enough for the calls to overlap
        return key.upper()


_shared_client = _LoopBoundClient()


async def fetch(key: str) -> dict[str, Any]:
    """Fetch through the module's one async client (a common way to write tools)."""
    return {"key": key, "value": await _shared_client.fetch(key)}


loopbound_app = _one_turn_calls_app("loopbound", fetch, "key", ("a", "b", "c"), "fetched: ")


# -- parked: a remote tool on a queue ("parked") that only a test's own worker consumes -----

PARKED_QUEUE = "parked"


def parked_tool(tag: str) -> dict[str, Any]:
    """Leave a mark in Redis (``test:parked:<tag>``), so a test can tell whether it ran."""
    import redis

    with redis.Redis.from_url(os.environ["ADK_CELERY_REDIS_URL"]) as client:
        client.set(f"test:parked:{tag}", os.getpid())
    return {"tag": tag}


def _parked_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return _call("parked_tool", tag=last_user_text(request))
    return f"ran {answers[-1].response.get('tag')}"


_parked = LongRunningFunctionTool(parked_tool)
_parked.custom_metadata = {QUEUE_METADATA_KEY: PARKED_QUEUE}
parked_app = App(name="parked", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_parked_model), tools=[_parked]))

_parked_plain = FunctionTool(parked_tool)
_parked_plain.custom_metadata = {QUEUE_METADATA_KEY: PARKED_QUEUE}
parked_plain_app = App(name="parked_plain", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_parked_model),
    tools=[_parked_plain]))
"""The same tool as a plain (not long-running) tool: a worker's answer is its only answer."""


ALL_APPS = [lookup_app, fanout_app, approval_app, exploding_app, chat_app, rendezvous_app,
            loopbound_app, parked_app, parked_plain_app, two_approvals_app, temp_key_app]
APP_SPECS = ",".join(
    f"tests.apps:{name}" for name in
    ("lookup_app", "fanout_app", "approval_app", "exploding_app", "chat_app", "rendezvous_app",
     "loopbound_app", "parked_app", "parked_plain_app", "two_approvals_app",
     "temp_key_app")
)


# -- parallel: a ParallelAgent of three LlmAgents, then an agent that sees every branch -----

def _branch_model(name: str):
    def answer(request: LlmRequest) -> Any:
        return f"{name} done pid {os.getpid()} saw {len(request.contents)}"
    return FunctionLlm(record_requests=False, fn=answer)


def _summary_model(request: LlmRequest) -> Any:
    seen = sorted({word for c in request.contents for p in c.parts or [] if p.text
                   for word in ("a done", "b done", "c done") if word in p.text})
    return "summary of " + ", ".join(seen)


def _parallel_root() -> Any:
    from orchestrator import ParallelAgent, SequentialAgent

    fan = ParallelAgent(name="fan", sub_agents=[
        LlmAgent(name=n, model=_branch_model(n)) for n in ("a", "b", "c")
    ])
    return SequentialAgent(name="pipeline", sub_agents=[
        fan, LlmAgent(name="after", model=FunctionLlm(record_requests=False, fn=_summary_model)),
    ])


def _resumable(name: str, root: Any) -> App:
    from orchestrator import ResumabilityConfig

    return App(name=name, root_agent=root, resumability_config=ResumabilityConfig(is_resumable=True))


parallel_app = _resumable("parallel", _parallel_root())


# -- branch_pause: one branch waits for an answer from outside ------------------------------

def ask_human(question: str) -> None:
    """Ask a human; the answer comes later."""
    return None


def _asking_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return _call("ask_human", question="ok?")
    return f"x heard {answers[-1].response}"


def _branch_pause_root() -> Any:
    from orchestrator import ParallelAgent, SequentialAgent

    fan = ParallelAgent(name="fan", sub_agents=[
        LlmAgent(name="x", model=FunctionLlm(record_requests=False, fn=_asking_model),
                 tools=[LongRunningFunctionTool(ask_human)]),
        LlmAgent(name="y", model=_branch_model("y")),
    ])
    return SequentialAgent(name="pipeline", sub_agents=[
        fan, LlmAgent(name="after", model=FunctionLlm(record_requests=False, fn=_summary_model)),
    ])


branch_pause_app = _resumable("branch_pause", _branch_pause_root())

ALL_APPS += [parallel_app, branch_pause_app]
APP_SPECS += ",tests.apps:parallel_app,tests.apps:branch_pause_app"


# -- nested: a branch that is itself a SequentialAgent; and a branch that fails -------------

def _explode_model(request: LlmRequest) -> Any:
    raise RuntimeError("branch model exploded")


def _nested_root() -> Any:
    from orchestrator import ParallelAgent, SequentialAgent

    inner = SequentialAgent(name="steps", sub_agents=[
        LlmAgent(name="s1", model=_branch_model("s1"), output_key="s1_out"),
        LlmAgent(name="s2", model=FunctionLlm(record_requests=False, fn=lambda r: "s2 read " + str(
            next((p.text for c in r.contents for p in c.parts or [] if p.text and "s1 done" in p.text), None) is not None))),
    ])
    return ParallelAgent(name="fan", sub_agents=[inner, LlmAgent(name="solo", model=_branch_model("solo"))])


nested_app = _resumable("nested", _nested_root())


def _failing_root() -> Any:
    from orchestrator import ParallelAgent

    return ParallelAgent(name="fan", sub_agents=[
        LlmAgent(name="ok", model=_branch_model("ok")),
        LlmAgent(name="boom", model=FunctionLlm(record_requests=False, fn=_explode_model)),
    ])


failing_branch_app = _resumable("failing_branch", _failing_root())


# -- tool_branches: each branch calls a tool (on its worker) before it answers --------------

def measure(what: str) -> dict[str, Any]:
    """Measure something (a plain tool: runs where its agent runs)."""
    return {"what": what, "size": len(what)}


def _measuring_model(name: str):
    def answer(request: LlmRequest) -> Any:
        answers = function_responses(request)
        if not answers:
            return _call("measure", what=name)
        return f"{name} measured {answers[-1].response.get('size')}"
    return FunctionLlm(record_requests=False, fn=answer)


def _tool_branches_root() -> Any:
    from orchestrator import FunctionTool, ParallelAgent, SequentialAgent

    fan = ParallelAgent(name="fan", sub_agents=[
        LlmAgent(name=n, model=_measuring_model(n), tools=[FunctionTool(measure)])
        for n in ("p", "q")
    ])
    return SequentialAgent(name="pipeline", sub_agents=[
        fan, LlmAgent(name="after", model=FunctionLlm(record_requests=False, fn=_summary_model)),
    ])


tool_branches_app = _resumable("tool_branches", _tool_branches_root())

ALL_APPS += [nested_app, failing_branch_app, tool_branches_app]
APP_SPECS += ",tests.apps:nested_app,tests.apps:failing_branch_app,tests.apps:tool_branches_app"

# -- after_agent: an agent whose after_agent callback writes state --------------------------

def count_after_runs(callback_context: CallbackContext) -> None:
    """An after_agent callback with an effect (an audit count): ``after_runs`` + 1 in state."""
    callback_context.state["after_runs"] = callback_context.state.get("after_runs", 0) + 1


chat_after_app = App(name="chat_after", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_chat_model),
    after_agent_callback=count_after_runs))
lookup_after_app = App(name="lookup_after", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_lookup_model),
    tools=[LongRunningFunctionTool(slow_lookup)], after_agent_callback=count_after_runs))

ALL_APPS += [chat_after_app, lookup_after_app]
APP_SPECS += ",tests.apps:chat_after_app,tests.apps:lookup_after_app"

# -- plugins: apps whose plugins show where each callback runs (tests/apps_plugins.py) -------

from tests.apps_plugins import PLUGIN_APP_SPECS, PLUGIN_APPS  # noqa: E402

ALL_APPS += PLUGIN_APPS
APP_SPECS += "," + PLUGIN_APP_SPECS

# -- transfers: agent callbacks around transfers, tools on workers (tests/apps_transfers.py) --

from tests.apps_transfers import TRANSFER_APP_SPECS, TRANSFER_APPS  # noqa: E402

ALL_APPS += TRANSFER_APPS
APP_SPECS += "," + TRANSFER_APP_SPECS

# -- refused: a plain tool sent to workers inside a SequentialAgent of a non-resumable app ----

from orchestrator import SequentialAgent  # noqa: E402
from orchestrator.apps.app import ResumabilityConfig  # noqa: E402


def tally(n: int) -> dict[str, Any]:
    """A plain tool that runs on workers (its queue metadata)."""
    return {"n": n}


def _steps_root() -> Any:
    remote_tally = FunctionTool(tally)
    remote_tally.custom_metadata = {QUEUE_METADATA_KEY: "adk.tools"}
    counting = LlmAgent(
        name="counting", model=FunctionLlm(record_requests=False, fn=lambda r: "counted"),
        tools=[remote_tally])
    after = LlmAgent(name="after", model=FunctionLlm(record_requests=False, fn=lambda r: "after"))
    return SequentialAgent(name="steps", sub_agents=[counting, after])


remote_step_app = App(name="remote_step", root_agent=_steps_root())
"""Not in ALL_APPS: orchestrators refuse it at start-up (orchestrator.distributed.app_checks)."""
resumable_remote_step_app = App(name="remote_step", root_agent=_steps_root(),
                                resumability_config=ResumabilityConfig(is_resumable=True))
