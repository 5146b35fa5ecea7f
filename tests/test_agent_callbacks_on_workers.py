"""Agent callbacks run once per run of an agent, wherever its plain tools run.

A plain tool sent to workers pauses the invocation until its answer is in (in process it
runs inside the agent's run). The agents' ``before_agent`` / ``after_agent`` callbacks (and
the plugins' ones) ran on both sides of that pause: twice, each committing its state
delta twice. The same apps, their tool in process or on workers, must commit the same
events and leave the same state.

A long-running tool's pause does end the runs of the agents waiting for it, in google-adk
as here: their callbacks run again when the answer continues them (see the LRO tests).
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from google.genai import types

from orchestrator import (
    App,
    FunctionTool,
    InMemoryRunner,
    LlmAgent,
    LongRunningFunctionTool,
    LoopAgent,
    ParallelAgent,
    ResumabilityConfig,
    SequentialAgent,
    failpoints,
)
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.errors import FailpointError
from orchestrator.models.fake import ScriptedLlm
from tests.apps_transfers import CountingPlugin as Counting
from tests.apps_transfers import count_after as after
from tests.apps_transfers import count_before as before
from tests.support.action_tools import remote
from tests.support.events import call, function_response, simplify, user_text

CALLBACKS = {"before_agent_callback": before, "after_agent_callback": after}


def plain() -> dict[str, Any]:
    return {"plain": 1}


def to_sub(tool_context: Any) -> dict[str, Any]:
    tool_context.actions.transfer_to_agent = "grandchild"
    return {"routed": True}


def _tool(func: Any, on_workers: bool) -> FunctionTool:
    return remote(func) if on_workers else FunctionTool(func)


def _llm(name: str, script: list[Any], tools: list[Any] = (), **fields: Any) -> LlmAgent:
    return LlmAgent(name=name, model=ScriptedLlm(responses=script), tools=list(tools),
                    **CALLBACKS, **fields)


def _app(root: Any, resumable: bool) -> App:
    return App(name="a", root_agent=root, plugins=[Counting()],
               resumability_config=ResumabilityConfig(is_resumable=True) if resumable else None)


def single(on_workers: bool, resumable: bool) -> App:
    return _app(_llm("agent", [call("plain"), "DONE"], [_tool(plain, on_workers)]), resumable)


def twice(on_workers: bool, resumable: bool) -> App:
    # Two remote calls one after the other: two pauses in one run of the agent.
    return _app(_llm("agent", [call("plain"), call("plain"), "DONE"], [_tool(plain, on_workers)]),
                resumable)


def transfer(on_workers: bool, resumable: bool) -> App:
    child = _llm("child", [call("plain"), "CHILD DONE"], [_tool(plain, on_workers)])
    root = _llm("root", [call("transfer_to_agent", agent_name="child")], sub_agents=[child])
    return _app(root, resumable)


def transfer_deeper(on_workers: bool, resumable: bool) -> App:
    # root -> child -> grandchild: the agents that transferred wait for the grandchild's tool.
    grandchild = _llm("grandchild", [call("plain"), "GRANDCHILD DONE"], [_tool(plain, on_workers)])
    child = _llm("child", [call("to_sub")], [FunctionTool(to_sub)], sub_agents=[grandchild])
    root = _llm("root", [call("transfer_to_agent", agent_name="child")], sub_agents=[child])
    return _app(root, resumable)


def sequence(on_workers: bool, resumable: bool) -> App:
    first = _llm("first", [call("plain"), "FIRST"], [_tool(plain, on_workers)])
    second = _llm("second", ["SECOND"])
    return _app(SequentialAgent(name="seq", sub_agents=[first, second], **CALLBACKS), resumable)


def loop(on_workers: bool, resumable: bool) -> App:
    # The second iteration is a new run of the agent: its callbacks run again, in both.
    agent = _llm("agent", [call("plain"), "ONE", call("plain"), "TWO"], [_tool(plain, on_workers)])
    return _app(LoopAgent(name="loop", max_iterations=2, sub_agents=[agent], **CALLBACKS),
                resumable)


def parallel(on_workers: bool, resumable: bool) -> App:
    left = _llm("left", [call("plain"), "LEFT"], [_tool(plain, on_workers)])
    right = _llm("right", [call("plain"), "RIGHT"], [_tool(plain, on_workers)])
    par = ParallelAgent(name="par", sub_agents=[left, right], **CALLBACKS)
    last = _llm("last", ["LAST"])
    return _app(SequentialAgent(name="seq", sub_agents=[par, last], **CALLBACKS), resumable)


def _shown(events: list[Any]) -> list[tuple[Any, ...]]:
    """Each committed event: author, what it says (or its actions), and its state delta."""
    return [(*simplify(e), dict(e.actions.state_delta)) for e in events]


async def _run(app: App, agents_queue: str | None = "agents") -> tuple[Any, list, dict]:
    rt = EmbeddedRuntime(AppRegistry([app]), agents_queue=agents_queue)
    inv = await rt.enqueue(app_name=app.name, user_id="u", new_message="go")
    rec = await rt.wait(app.name, inv, timeout=5, until=InvocationStatus.FINISHED)
    session = await rt.session_service.get_session(
        app_name=app.name, user_id="u", session_id=rec.session_id)
    return (rec.status, rec.error), _shown(await rt.events(app.name, inv)), dict(session.state)


def _once_each(agents: Sequence[str], transferred: Sequence[str] = ()) -> dict[str, int]:
    """Each agent's callbacks once; an agent that ``transferred`` under a root LlmAgent ran
    its before-callbacks only (google-adk 2.13 ends its run at the transfer)."""
    return {f"{kind}_{name}": 1 for name in agents for kind in ("b", "a", "pb", "pa")} | {
        f"{kind}_{name}": 1 for name in transferred for kind in ("b", "pb")}


@pytest.mark.parametrize(("build", "agents", "transferred"), [
    (single, ["agent"], []), (twice, ["agent"], []), (transfer, ["child"], ["root"]),
    (transfer_deeper, ["grandchild"], ["root", "child"]),
])
@pytest.mark.parametrize("resumable", [False, True])
async def test_llm_agents(build: Callable, agents: list[str], transferred: list[str],
                          resumable: bool):
    in_process = await _run(build(False, resumable))
    on_workers = await _run(build(True, resumable))
    assert on_workers == in_process
    assert in_process[0] == (InvocationStatus.COMPLETED, None)
    assert in_process[2] == _once_each(agents, transferred)


def _by_author(shown: list[tuple[Any, ...]]) -> dict[str, list[tuple[Any, ...]]]:
    """Each author's events in order (parallel branches interleave as they run)."""
    authors: dict[str, list[tuple[Any, ...]]] = {}
    for event in shown:
        authors.setdefault(event[0], []).append(event)
    return authors


@pytest.mark.parametrize(("build", "state"), [
    (sequence, {"seq": 1, "first": 1, "second": 1}),
    (loop, {"loop": 1, "agent": 2}),
    (parallel, {"seq": 1, "par": 1, "left": 1, "right": 1, "last": 1}),
])
@pytest.mark.parametrize("agents_queue", [None, "agents"])
async def test_workflow_agents(build: Callable, state: dict[str, int], agents_queue):
    in_process = await _run(build(False, True), agents_queue)
    on_workers = await _run(build(True, True), agents_queue)
    if build is parallel:
        assert _by_author(on_workers[1]) == _by_author(in_process[1])
        assert (on_workers[0], on_workers[2]) == (in_process[0], in_process[2])
    else:
        assert on_workers == in_process
    assert in_process[0] == (InvocationStatus.COMPLETED, None)
    assert in_process[2] == {f"{kind}_{name}": count for name, count in state.items()
                             for kind in ("b", "a", "pb", "pa")}


# --- long-running tools: their pause ends the run, as in google-adk ---------------------------
#
# Measured on google-adk 2.13 (InMemoryRunner, the answer sent with a second run_async), with
# the same callbacks and plugin:
# - LlmAgent "agent" with a LongRunningFunctionTool returning None, resumable or not: each
#   run_async runs before_agent and after_agent (plugin's, then agent's): after the first
#   "[agent] FC" comes "[agent] {pa_agent: 1, a_agent: 1}"; the answer's run starts with
#   "[agent] {pb_agent: 2, b_agent: 2}". Final state: 2 of each.
# - SequentialAgent "seq" [agent, after], resumable: the answer's run re-enters seq and agent
#   with their before-callbacks again: seq 2 of each, agent 2 of each, after 1 of each.
#   Not resumable: the answer's run runs agent alone: seq 1 of each, agent 2 of each, and
#   "after" never runs.


def lro() -> None:
    return None


def lro_app(shape: str, resumable: bool) -> App:
    agent = _llm("agent", [call("lro"), "DONE"], [LongRunningFunctionTool(lro)])
    if shape == "single":
        return _app(agent, resumable)
    return _app(SequentialAgent(name="seq", sub_agents=[agent, _llm("after", ["AFTER"])],
                                **CALLBACKS), resumable)


def _counts(**agents: int) -> dict[str, int]:
    return {f"{kind}_{name}": count for name, count in agents.items()
            for kind in ("b", "a", "pb", "pa")}


ADK_LRO = {
    ("single", False): _counts(agent=2),
    ("single", True): _counts(agent=2),
    ("seq", False): _counts(seq=1, agent=2),
    ("seq", True): _counts(seq=2, agent=2, after=1),
}
"""Final state after the long-running call's answer, as google-adk 2.13 leaves it."""


async def _lro_in_process(app: App) -> tuple[list, dict]:
    runner = InMemoryRunner(app=app)
    session = await runner.session_service.create_session(app_name=app.name, user_id="u")
    shown = []
    message = user_text("go")
    for _ in range(2):
        events = [e async for e in runner.run_async(
            user_id="u", session_id=session.id, new_message=message)]
        shown += _shown(events)
        [call_id] = [c.id for e in events for c in e.get_function_calls()
                     if c.name == "lro"] or [None]
        message = function_response(call_id, "lro", {"ok": True})
    session = await runner.session_service.get_session(
        app_name=app.name, user_id="u", session_id=session.id)
    return shown, dict(session.state)


async def _lro_on_workers(app: App) -> tuple[list, dict]:
    rt = EmbeddedRuntime(AppRegistry([app]))
    inv = await rt.enqueue(app_name=app.name, user_id="u", new_message="go")
    rec = await rt.wait(app.name, inv, timeout=5)
    while rec.status is not InvocationStatus.PAUSED or not rec.pending_calls:
        rec = await rt.wait(app.name, inv, timeout=5)
    [call_id] = rec.pending_calls
    await rt.answer(app.name, inv, call_id, {"ok": True})
    rec = await rt.wait(app.name, inv, timeout=5, until=InvocationStatus.FINISHED)
    assert rec.status is InvocationStatus.COMPLETED, rec.error
    session = await rt.session_service.get_session(
        app_name=app.name, user_id="u", session_id=rec.session_id)
    shown = [e for e in _shown(await rt.events(app.name, inv)) if e[0] != "user"]
    return shown, dict(session.state)


@pytest.mark.parametrize("shape", ["single", "seq"])
@pytest.mark.parametrize("resumable", [False, True])
async def test_a_long_running_call_ends_the_run_as_in_google_adk(shape: str, resumable: bool):
    in_process = await _lro_in_process(lro_app(shape, resumable))
    on_workers = await _lro_on_workers(lro_app(shape, resumable))
    assert in_process[1] == ADK_LRO[(shape, resumable)]
    assert on_workers == in_process
    # The first run ends at the call: the agent's after-callbacks are committed right after it.
    at = next(i for i, e in enumerate(on_workers[0]) if e[1][0] == "call")
    assert on_workers[0][at + 1] == ("agent", ("actions", {"state_delta": {
        "pa_agent": 1, "a_agent": 1}}), {"pa_agent": 1, "a_agent": 1})


def lro_transfer_app(resumable: bool) -> App:
    agent = _llm("agent", [call("lro"), "DONE"], [LongRunningFunctionTool(lro)])
    root = _llm("root", [call("transfer_to_agent", agent_name="agent"), "ROOT AGAIN"],
                sub_agents=[agent])
    return _app(root, resumable)


@pytest.mark.parametrize("resumable", [False, True])
async def test_a_long_running_call_after_a_transfer_is_continued_by_its_agent(resumable: bool):
    """google-adk 2.13: the answer's run runs "agent" alone (before, "DONE", after): agent 2
    of each. It ends "root" at its transfer, without root's after-callbacks (root: before 1,
    after 0), resumable or not; in process as on workers. (Root's run went round the
    agent's: its after-callbacks ran, and in a resumable app the answer resumed it.)"""
    in_process = await _lro_in_process(lro_transfer_app(resumable))
    on_workers = await _lro_on_workers(lro_transfer_app(resumable))
    assert on_workers == in_process
    assert ("agent", "DONE", {}) in in_process[0]
    assert ("root", "ROOT AGAIN", {}) not in in_process[0]
    assert in_process[1] == _counts(agent=2) | {"pb_root": 1, "b_root": 1}


# --- under a root LlmAgent, a transfer ends the run of the agent that makes it ----------------
#
# Measured on google-adk 2.13 (InMemoryRunner; the callbacks and the plugin above; the plain
# tool in process), root LlmAgent "root" with sub-agents "child" (and "peer"); "child" calls
# plain, then transfers:
# - to its peer, which answers "PEER": root before, transfer; child before, plain, transfer;
#   peer before, "PEER", after. Neither root's nor child's after-callbacks ran (theirs nor
#   the plugin's); in a resumable app each one's end_of_agent is committed right after its
#   transfer's response, before the target's events.
# - back to root, which answers "ROOT AGAIN": root runs again, before-callbacks a second
#   time (pb_root/b_root 2), and its after-callbacks once, at the end of that second run.
# A transfer under a workflow agent is not a hop there (google-adk's legacy path): the target
# runs inside the run of the agent that transferred, whose after-callbacks run after it.

END = ("actions", {"end_of_agent": True})


def _callbacks(name: str, kind: str, n: int = 1) -> tuple[Any, ...]:
    delta = {f"p{kind}_{name}": n, f"{kind}_{name}": n}
    return (name, ("actions", {"state_delta": delta}), delta)


def _transfer_events(name: str, target: str) -> list[tuple[Any, ...]]:
    return [(name, ("call", "transfer_to_agent", {"agent_name": target}), {}),
            (name, ("response", "transfer_to_agent", {"result": None}), {})]


def _ended(name: str, resumable: bool) -> list[tuple[Any, ...]]:
    return [(name, END, {})] if resumable else []


def to_peer(on_workers: bool, resumable: bool) -> App:
    child = _llm("child", [call("plain"), call("transfer_to_agent", agent_name="peer")],
                 [_tool(plain, on_workers)])
    root = _llm("root", [call("transfer_to_agent", agent_name="child")],
                sub_agents=[child, _llm("peer", ["PEER"])])
    return _app(root, resumable)


def back_to_root(on_workers: bool, resumable: bool) -> App:
    child = _llm("child", [call("plain"), call("transfer_to_agent", agent_name="root")],
                 [_tool(plain, on_workers)])
    root = _llm("root", [call("transfer_to_agent", agent_name="child"), "ROOT AGAIN"],
                sub_agents=[child])
    return _app(root, resumable)


def _adk_transfers(build: Callable, resumable: bool) -> list[tuple[Any, ...]]:
    """The events google-adk 2.13 commits for ``build`` (measured; see above)."""
    child = [_callbacks("child", "b"), ("child", ("call", "plain", {}), {}),
             ("child", ("response", "plain", {"plain": 1}), {})]
    start = [_callbacks("root", "b"), *_transfer_events("root", "child"),
             *_ended("root", resumable), *child]
    if build is to_peer:
        return [*start, *_transfer_events("child", "peer"), *_ended("child", resumable),
                _callbacks("peer", "b"), ("peer", "PEER", {}), *_ended("peer", resumable),
                _callbacks("peer", "a")]
    return [*start, *_transfer_events("child", "root"), *_ended("child", resumable),
            _callbacks("root", "b", 2), ("root", "ROOT AGAIN", {}), *_ended("root", resumable),
            _callbacks("root", "a")]


@pytest.mark.parametrize("build", [to_peer, back_to_root])
@pytest.mark.parametrize("resumable", [False, True])
async def test_a_transfer_ends_the_run_of_the_agent_that_makes_it(build: Callable,
                                                                  resumable: bool):
    """google-adk 2.13's events and state (measured), in process and with child's tool on
    workers (the invocation pauses for it, in the run that child's transfer ends). Here the
    agents that transferred ran their after-callbacks when their target was done."""
    in_process = await _run(build(False, resumable))
    on_workers = await _run(build(True, resumable))
    assert on_workers == in_process
    assert in_process[0] == (InvocationStatus.COMPLETED, None)
    assert in_process[1][1:] == _adk_transfers(build, resumable)  # after the user's message
    assert in_process[2] == {k: v for e in _adk_transfers(build, resumable) for k, v in e[2].items()}


async def test_after_a_transfer_the_next_turn_goes_to_the_agent_that_answered():
    """google-adk 2.13 (measured): root transfers to child, which answers "CHILD"; the next
    message goes to child (it spoke last), which transfers to its peer. Here root's
    after-callbacks committed an event of root's last, and the next message went to root."""
    child = _llm("child", ["CHILD", call("transfer_to_agent", agent_name="peer")])
    root = _llm("root", [call("transfer_to_agent", agent_name="child"), "ROOT"],
                sub_agents=[child, _llm("peer", ["PEER"])])
    app = _app(root, resumable=False)
    rt = EmbeddedRuntime(AppRegistry([app]))
    first = await rt.enqueue(app_name=app.name, user_id="u", new_message="go")
    rec = await rt.wait(app.name, first, timeout=5, until=InvocationStatus.FINISHED)
    second = await rt.enqueue(app_name=app.name, user_id="u", session_id=rec.session_id,
                              new_message="again")
    rec = await rt.wait(app.name, second, timeout=5, until=InvocationStatus.FINISHED)
    assert rec.status is InvocationStatus.COMPLETED, rec.error
    assert _shown(await rt.events(app.name, second))[1:] == [
        _callbacks("child", "b", 2), *_transfer_events("child", "peer"),
        _callbacks("peer", "b"), ("peer", "PEER", {}), _callbacks("peer", "a")]
    session = await rt.session_service.get_session(
        app_name=app.name, user_id="u", session_id=rec.session_id)
    assert dict(session.state) == {"pb_root": 1, "b_root": 1, "pb_child": 2, "b_child": 2,
                                   "pa_child": 1, "a_child": 1, **_counts(peer=1)}


# --- a confirmation: its answer comes with a new run, as in google-adk ------------------------


def confirmed(on_workers: bool, resumable: bool) -> App:
    tool = FunctionTool(plain, require_confirmation=True)
    if on_workers:
        tool.custom_metadata = remote(plain).custom_metadata
    return _app(_llm("agent", [call("plain"), "DONE"], [tool]), resumable)


async def _confirm_and_finish(app: App) -> tuple[Any, list, dict]:
    rt = EmbeddedRuntime(AppRegistry([app]))
    inv = await rt.enqueue(app_name=app.name, user_id="u", new_message="go")
    rec = await rt.wait(app.name, inv, timeout=5)
    [request] = rec.pending_calls
    await rt.answer(app.name, inv, request, {"confirmed": True})
    rec = await rt.wait(app.name, inv, timeout=5, until=InvocationStatus.FINISHED)
    session = await rt.session_service.get_session(
        app_name=app.name, user_id="u", session_id=rec.session_id)
    shown = [(author, ("call", "adk_request_confirmation") if said[:2] == (
        "call", "adk_request_confirmation") else said, delta)  # its args hold a call id
        for author, said, delta in _shown(await rt.events(app.name, inv))]
    return (rec.status, rec.error), shown, dict(session.state)


@pytest.mark.parametrize("resumable", [False, True])
async def test_a_confirmed_call_runs_when_before_agent_callbacks_write_state(resumable: bool):
    """google-adk 2.13 (measured): the confirmation's run commits the before-callbacks'
    event, then the tool's answer, then the model's. Here the callbacks' event hid the
    confirmation: the tool never ran (on workers, its call stayed open for ever)."""
    in_process = await _confirm_and_finish(confirmed(False, resumable))
    on_workers = await _confirm_and_finish(confirmed(True, resumable))
    assert on_workers == in_process
    assert in_process[0] == (InvocationStatus.COMPLETED, None)
    answer = in_process[1].index(("user", ("response", "adk_request_confirmation",
                                           {"confirmed": True}), {}))
    assert in_process[1][answer + 2] == ("agent", ("response", "plain", {"plain": 1}), {})
    assert in_process[2] == _counts(agent=2)


# --- a run recovered from its log takes up the agents under way -------------------------------


@pytest.mark.parametrize("failpoint", ["dispatch.before_publish", "runner.answers_committed"])
@pytest.mark.parametrize("resumable", [False, True])
async def test_a_recovered_run_does_not_start_the_agents_again(failpoint: str, resumable: bool):
    """The orchestrator stops mid-run (after committing a remote call, or its answer);
    the run that recovers the invocation from its log runs no before-callback again."""
    (status, error), events, state = await _recovered_after_stop(transfer(True, resumable),
                                                                 failpoint)
    assert status is InvocationStatus.COMPLETED, error
    assert state == _once_each(["child"], ["root"])
    in_process = await _run(transfer(False, resumable))
    assert events == in_process[1]


@pytest.mark.parametrize("failpoint", ["dispatch.before_publish", "runner.answers_committed"])
async def test_a_recovered_resumable_transfer_goes_on_in_the_sub_agent(failpoint: str):
    """Without any callback: the recovered root went on with its own turn, not the child's."""
    def build(on_workers: bool) -> App:
        child = LlmAgent(name="child", model=ScriptedLlm(responses=[call("plain"), "CHILD"]),
                         tools=[_tool(plain, on_workers)])
        root = LlmAgent(name="root", sub_agents=[child], model=ScriptedLlm(
            responses=[call("transfer_to_agent", agent_name="child"), "ROOT AGAIN"]))
        return App(name="a", root_agent=root,
                   resumability_config=ResumabilityConfig(is_resumable=True))

    (status, error), events, _ = await _recovered_after_stop(build(True), failpoint)
    assert status is InvocationStatus.COMPLETED, error
    in_process = await _run(build(False))
    assert events == in_process[1]
    assert in_process[1][-2:] == [("child", "CHILD", {}), ("child", END, {})]


@pytest.mark.parametrize("failpoint", ["transfer.answered", "runner.transfer_hop"])
@pytest.mark.parametrize("resumable", [False, True])
async def test_a_run_recovered_between_a_transfer_and_its_target(failpoint: str,
                                                                 resumable: bool):
    """The orchestrator stops after root's transfer is committed, before (or after) root's
    end: the recovered run ends root's run as in process (no after-callback, its end once)
    and starts child once; google-adk's events and state (see to_peer)."""
    app = to_peer(True, resumable)
    rt = EmbeddedRuntime(AppRegistry([app]))
    rec = await _stopped_once(rt, app, failpoint)
    assert _shown(await rt.events(app.name, rec.invocation_id))[-1][0] == "root"  # child had not started
    (status, error), events, state = await _recovered(rt, app, rec)
    assert status is InvocationStatus.COMPLETED, error
    assert events[1:] == _adk_transfers(to_peer, resumable)
    assert state == {k: v for e in _adk_transfers(to_peer, resumable) for k, v in e[2].items()}


def saying_after(on_workers: bool, resumable: bool) -> App:
    """An after_agent callback that also says something: an event with content, by the
    agent, after its final answer."""
    def sign(callback_context: Any) -> types.Content:
        after(callback_context)
        return types.Content(role="model", parts=[types.Part(text="SIGNED")])

    agent = LlmAgent(name="agent", model=ScriptedLlm(responses=[call("plain"), "DONE"]),
                     tools=[_tool(plain, on_workers)], before_agent_callback=before,
                     after_agent_callback=sign)
    return _app(agent, resumable)


async def _stopped_once(rt: EmbeddedRuntime, app: App, failpoint: str, message: str = "go",
                        **fields: Any) -> InvocationRecord:
    """Enqueue a message with ``failpoint`` armed to fail once (the drain that meets it
    stops, as if its orchestrator were killed there); the record it left, not completed."""
    failpoints.arm(f"{failpoint}=error*1")
    try:
        inv = await rt.enqueue(app_name=app.name, user_id="u", new_message=message, **fields)
        await _quiet(rt)
    finally:
        failpoints.disarm()
    rec = await rt.status(app.name, inv)
    assert rec.status is not InvocationStatus.COMPLETED
    return rec


async def _recovered(rt: EmbeddedRuntime, app: App, rec: InvocationRecord
                     ) -> tuple[Any, list, dict]:
    """Let the next holder of the session recover the stopped invocation; how it ended."""
    await rt.service.drain((app.name, "u", rec.session_id))
    rec = await rt.wait(app.name, rec.invocation_id, timeout=5, until=InvocationStatus.FINISHED)
    session = await rt.session_service.get_session(
        app_name=app.name, user_id="u", session_id=rec.session_id)
    return ((rec.status, rec.error), _shown(await rt.events(app.name, rec.invocation_id)),
            dict(session.state))


async def _recovered_after_stop(app: App, failpoint: str) -> tuple[Any, list, dict]:
    """Run ``app`` stopped once at ``failpoint``, then recovered by the next holder."""
    rt = EmbeddedRuntime(AppRegistry([app]))
    return await _recovered(rt, app, await _stopped_once(rt, app, failpoint))


@pytest.mark.parametrize("build", [single, transfer, saying_after])
@pytest.mark.parametrize("resumable", [False, True])
async def test_a_run_recovered_after_its_agents_ended_answers_once(build: Callable, resumable: bool):
    """Everything committed (the final text, then the after_agent callbacks' events, the
    plugin's and the agent's), the orchestrator stops before saving the record: the run
    that recovers the invocation calls no model and runs no after-callback again."""
    recovered = await _recovered_after_stop(build(True, resumable),
                                            "orchestrator.resume.before_save")
    in_process = await _run(build(False, resumable))
    assert recovered == in_process
    assert in_process[0] == (InvocationStatus.COMPLETED, None)


def stopping_in_after(build: Callable[[bool, bool], App], agent_name: str) -> Callable[[bool, bool], App]:
    """``build``, whose agent ``agent_name`` has an after_agent callback that first meets
    the failpoint ``after_agent.<agent_name>`` (the plugin's callback ran before it)."""
    def stopping(on_workers: bool, resumable: bool) -> App:
        def stop(callback_context: Any) -> None:
            failpoints.hit(f"after_agent.{agent_name}")

        app = build(on_workers, resumable)
        agent = app.root_agent.find_agent(agent_name)
        assert agent is not None
        agent.after_agent_callback = [stop, after]
        return app
    return stopping


def routed(on_workers: bool, resumable: bool) -> App:
    """A workflow root: ``router`` transfers to its sub-agent ``helper``, which runs inside
    router's run (not a hop); router's after-callbacks run when helper is done."""
    helper = _llm("helper", [call("plain"), "HELPED"], [_tool(plain, on_workers)])
    router = _llm("router", [call("transfer_to_agent", agent_name="helper")],
                  sub_agents=[helper])
    return _app(SequentialAgent(name="seq", sub_agents=[router], **CALLBACKS), resumable)


@pytest.mark.parametrize(("build", "agent_name", "resumable"), [
    (single, "agent", False),
    (transfer, "child", False),  # the final text committed, no end (the root ended at its transfer)
    # Resumable: the agent's end_of_agent is committed before its after_agent callbacks run.
    (single, "agent", True),
    (transfer, "child", True),  # root ended at its transfer: child ends the invocation
    (back_to_root, "root", True),  # root's second run, after child's transfer back
    (sequence, "first", True),  # seq goes on with second after first's end
    (sequence, "seq", True),  # the workflow root's own end
    (routed, "helper", True),  # a transfer under a workflow root: router goes on after it
    (routed, "router", True),
    (loop, "agent", True),  # the first iteration's end: the loop goes on after it
    (loop, "loop", True),
])
async def test_a_run_recovered_as_its_agents_end_ends_each_once(build: Callable, agent_name: str,
                                                                resumable: bool):
    """The orchestrator stops in an after_agent callback. The recovered run calls no model
    and ends each agent whose end is not committed, once, innermost first: the same events
    and state as a run that did not stop (each after_agent's effect once)."""
    stopping = stopping_in_after(build, agent_name)
    recovered = await _recovered_after_stop(stopping(True, resumable), f"after_agent.{agent_name}")
    in_process = await _run(stopping(False, resumable))
    assert recovered == in_process
    assert in_process[0] == (InvocationStatus.COMPLETED, None)


# --- a run recovered after a transfer back to the agent above ------------------------------


def ping_pong(on_workers: bool, resumable: bool) -> App:
    """The second message goes to child (it spoke last), which transfers back to root;
    root transfers to child again, which calls its tool and answers "CHILD 2"."""
    child = _llm("child", ["CHILD 1", call("transfer_to_agent", agent_name="root"),
                           call("plain"), "CHILD 2"], [_tool(plain, on_workers)])
    root = _llm("root", [call("transfer_to_agent", agent_name="child"),
                         call("transfer_to_agent", agent_name="child"), "ROOT EXTRA"],
                sub_agents=[child])
    return _app(root, resumable)


async def _second_turn(app: App, failpoint: str | None = None) -> tuple[Any, list, dict]:
    """Two messages; the second one's run stops once at ``failpoint`` (if any), then the
    next holder recovers it."""
    rt = EmbeddedRuntime(AppRegistry([app]))
    first = await rt.enqueue(app_name=app.name, user_id="u", new_message="go")
    rec = await rt.wait(app.name, first, timeout=5, until=InvocationStatus.FINISHED)
    if failpoint:  # at child's transfer back to root
        return await _recovered(rt, app, await _stopped_once(
            rt, app, failpoint, "again", session_id=rec.session_id))
    inv = await rt.enqueue(app_name=app.name, user_id="u", session_id=rec.session_id,
                           new_message="again")
    rec = await rt.wait(app.name, inv, timeout=5, until=InvocationStatus.FINISHED)
    session = await rt.session_service.get_session(
        app_name=app.name, user_id="u", session_id=rec.session_id)
    return (rec.status, rec.error), _shown(await rt.events(app.name, inv)), dict(session.state)


@pytest.mark.parametrize("failpoint", ["transfer.answered", "runner.transfer_hop"])
@pytest.mark.parametrize("resumable", [False, True])
async def test_a_run_recovered_at_a_transfer_back_does_not_act_on_it_again(failpoint: str,
                                                                          resumable: bool):
    """The run stops at child's transfer back to root. The recovered run finishes child's
    hop, runs root (with its before-callbacks) and, when root transfers to child again,
    child's second turn: the transfer answer handed to the recovered run is acted on once
    (child acted on it again: its turn skipped, root answered "ROOT EXTRA")."""
    in_process = await _second_turn(ping_pong(False, resumable))
    assert in_process[0] == (InvocationStatus.COMPLETED, None)
    assert ("child", "CHILD 2", {}) in in_process[1]
    assert ("root", "ROOT EXTRA", {}) not in in_process[1]
    recovered = await _second_turn(ping_pong(True, resumable), failpoint)
    assert recovered == in_process
    assert await _second_turn(ping_pong(True, resumable)) == in_process


def back_then_tool(on_workers: bool, resumable: bool) -> App:
    """Root transfers to child, which transfers back; root, re-entered, calls its tool."""
    child = _llm("child", [call("transfer_to_agent", agent_name="root")])
    root = _llm("root", [call("transfer_to_agent", agent_name="child"), call("plain"),
                         "ROOT AGAIN"], [_tool(plain, on_workers)], sub_agents=[child])
    return _app(root, resumable)


@pytest.mark.parametrize("failpoint", ["runner.answers_committed",
                                       "orchestrator.resume.before_save"])
@pytest.mark.parametrize("resumable", [False, True])
async def test_an_agent_reentered_by_a_transfer_back_is_under_way_again(failpoint: str,
                                                                       resumable: bool):
    """Root's tool answer (on workers) committed, the run stops: the recovered run goes
    on in root without running its before-callbacks a third time (resumable: root's end
    at its first transfer counted, though root was re-entered after it)."""
    recovered = await _recovered_after_stop(back_then_tool(True, resumable), failpoint)
    in_process = await _run(back_then_tool(False, resumable))
    assert in_process[0] == (InvocationStatus.COMPLETED, None)
    assert in_process[2]["b_root"] == 2
    assert recovered == in_process


async def test_an_agent_reentered_by_a_transfer_back_goes_on_after_its_call(monkeypatch):
    """Resumable, root's tool in process: the run stops once root's call is committed
    (the third calls committed: root's transfer, child's, root's call). The recovered run
    goes on in root, which answers; it ran nothing (root's end at its first transfer
    counted) and the invocation completed with root's call unanswered."""
    app = back_then_tool(False, True)
    rt = EmbeddedRuntime(AppRegistry([app]))
    hit, seen = failing_at("flow.calls_committed", 3)
    monkeypatch.setattr(failpoints, "hit", hit)
    inv = await rt.enqueue(app_name=app.name, user_id="u", new_message="go")
    await _quiet(rt)
    monkeypatch.undo()
    rec = await rt.status(app.name, inv)
    assert seen["hits"] == 3 and rec.status is not InvocationStatus.COMPLETED
    recovered = await _recovered(rt, app, rec)
    in_process = await _run(back_then_tool(False, True))
    assert in_process[1][-4:-2] == [("root", ("response", "plain", {"plain": 1}), {}),
                                    ("root", "ROOT AGAIN", {})]  # then its end, its after-callbacks
    assert recovered == in_process


def failing_at(name: str, nth: int) -> tuple[Callable[[str], None], dict[str, int]]:
    """``failpoints.hit`` whose Nth hit of ``name`` fails (the others pass); and the count."""
    real, seen = failpoints.hit, {"hits": 0}

    def hit(hit_name: str) -> None:
        if hit_name == name:
            seen["hits"] += 1
            if seen["hits"] == nth:
                raise FailpointError(f"failpoint {hit_name}")
        real(hit_name)

    return hit, seen


async def _quiet(rt: EmbeddedRuntime) -> None:
    """Wait until the runtime has nothing running (no drain, no job)."""
    for _ in range(500):
        await asyncio.sleep(0.01)
        if not rt._drains and not rt.transport._tasks:
            return
    raise TimeoutError("the embedded runtime did not settle")


def transfer_in_sequence(on_workers: bool, resumable: bool) -> App:
    """Under a workflow root: a transfers to sub (sub runs inside a's run), then b."""
    sub = _llm("sub", [call("plain"), "SUB"], [_tool(plain, on_workers)])
    first = _llm("a", [call("transfer_to_agent", agent_name="sub")], sub_agents=[sub])
    second = _llm("b", ["B"])
    return _app(SequentialAgent(name="seq", sub_agents=[first, second], **CALLBACKS), resumable)


@pytest.mark.parametrize(("build", "resumable"), [
    (to_peer, False), (to_peer, True), (transfer_in_sequence, True)])
async def test_a_run_recovered_after_a_committed_transfer_call_makes_the_transfer(
        build: Callable, resumable: bool):
    """The orchestrator stops right after committing a model turn whose call is
    transfer_to_agent, before running it: the recovered run answers the call and goes to
    the target (a hop under a root LlmAgent, the target's run inside the transferring
    agent's under a workflow root), as a run that did not stop; it does not ask the
    transferring agent's model again."""
    recovered = await _recovered_after_stop(build(False, resumable), "flow.calls_committed")
    in_process = await _run(build(False, resumable))
    assert in_process[0] == (InvocationStatus.COMPLETED, None)
    assert recovered == in_process


async def test_a_workflow_stopped_at_a_committed_transfer_call_is_not_resumed_if_not_resumable():
    """The same stop under a workflow root of an app that is not resumable: refused, as any
    stop mid-workflow of such an app."""
    recovered = await _recovered_after_stop(transfer_in_sequence(False, False),
                                            "flow.calls_committed")
    assert recovered[0][0] is InvocationStatus.FAILED
    assert "is not resumable" in recovered[0][1]


@pytest.mark.parametrize("resumable", [False, True])
async def test_a_workflow_stopped_before_any_agent_committed_starts_again(resumable: bool):
    """The orchestrator stops right after committing the user's message (the record saved
    running with it), before any agent committed an event: there is nowhere to resume
    from, and nothing to lose, so the next holder runs the invocation from its root, as a
    run that did not stop; also under a workflow root of an app that is not resumable
    (which used to fail, "make it resumable")."""
    recovered = await _recovered_after_stop(transfer_in_sequence(False, resumable),
                                            "runner.message_committed")
    in_process = await _run(transfer_in_sequence(False, resumable))
    assert in_process[0] == (InvocationStatus.COMPLETED, None)
    assert recovered == in_process
