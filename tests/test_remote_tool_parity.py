"""One app, its tool in process or on a worker: the same events are committed.

The embedded runtime runs a remote call through the job and resume code of workers and
orchestrators. A worker's answer is committed in the calling agent's name; in a resumable
app, the answer to a sub-agent's call (after a transfer) was continued by the root agent,
which answered again ('ROOT AGAIN') instead of the sub-agent.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from orchestrator import (
    App,
    FunctionTool,
    LlmAgent,
    ParallelAgent,
    ResumabilityConfig,
    SequentialAgent,
    ToolContext,
)
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.models.fake import ScriptedLlm
from tests.support.action_tools import remote, skip_tool, to_helper
from tests.support.events import call, simplify_all


def to_root(tool_context: ToolContext) -> dict[str, Any]:
    tool_context.actions.transfer_to_agent = "root"
    return {"routed": True}


def _tool(func: Any, on_workers: bool) -> FunctionTool:
    return remote(func) if on_workers else FunctionTool(func)


def _app(root: Any, resumable: bool) -> App:
    return App(name="a", root_agent=root,
               resumability_config=ResumabilityConfig(is_resumable=True) if resumable else None)


def transfer_then_child_skips(on_workers: bool, resumable: bool) -> App:
    child = LlmAgent(name="child", model=ScriptedLlm(responses=[call("skip_tool"), "CHILD SUMMARY"]),
                     tools=[_tool(skip_tool, on_workers)])
    root = LlmAgent(name="root", model=ScriptedLlm(responses=[call("transfer_to_agent", agent_name="child"), "ROOT AGAIN"]),
                    sub_agents=[child])
    return _app(root, resumable)


def child_transfers_to_peer(on_workers: bool, resumable: bool) -> App:
    helper = LlmAgent(name="helper", model=ScriptedLlm(responses=["helper here"]))
    child = LlmAgent(name="child", model=ScriptedLlm(responses=[call("to_helper"), "CHILD AGAIN"]),
                     tools=[_tool(to_helper, on_workers)])
    root = LlmAgent(name="root", model=ScriptedLlm(responses=[call("transfer_to_agent", agent_name="child"), "ROOT AGAIN"]),
                    sub_agents=[child, helper])
    return _app(root, resumable)


def child_transfers_to_parent(on_workers: bool, resumable: bool) -> App:
    child = LlmAgent(name="child", model=ScriptedLlm(responses=[call("to_root"), "CHILD AGAIN"]),
                     tools=[_tool(to_root, on_workers)])
    root = LlmAgent(name="root", model=ScriptedLlm(responses=[call("transfer_to_agent", agent_name="child"), "root back"]),
                    sub_agents=[child])
    return _app(root, resumable)


def sequence_skip(on_workers: bool, resumable: bool) -> App:
    first = LlmAgent(name="first", model=ScriptedLlm(responses=[call("skip_tool"), "FIRST SUMMARY"]),
                     tools=[_tool(skip_tool, on_workers)])
    second = LlmAgent(name="second", model=ScriptedLlm(responses=["second"]))
    return App(name="a", root_agent=SequentialAgent(name="seq", sub_agents=[first, second]),
               resumability_config=ResumabilityConfig(is_resumable=True))


def parallel_skip(on_workers: bool, resumable: bool) -> App:
    left = LlmAgent(name="left", model=ScriptedLlm(responses=[call("skip_tool"), "LEFT SUMMARY"]),
                    tools=[_tool(skip_tool, on_workers)])
    right = LlmAgent(name="right", model=ScriptedLlm(responses=["right"]))
    after = LlmAgent(name="after", model=ScriptedLlm(responses=["after"]))
    return App(name="a", root_agent=SequentialAgent(name="seq", sub_agents=[
        ParallelAgent(name="par", sub_agents=[left, right]), after]),
        resumability_config=ResumabilityConfig(is_resumable=True))


def seq_transfer_in_step(on_workers: bool, resumable: bool) -> App:
    # A step's LlmAgent whose remote tool transfers to its own sub-agent
    helper = LlmAgent(name="helper", model=ScriptedLlm(responses=["helper here"]))
    first = LlmAgent(name="first", model=ScriptedLlm(responses=[call("to_helper"), "FIRST AGAIN"]),
                     tools=[_tool(to_helper, on_workers)], sub_agents=[helper])
    second = LlmAgent(name="second", model=ScriptedLlm(responses=["second"]))
    return App(name="a", root_agent=SequentialAgent(name="seq", sub_agents=[first, second]),
               resumability_config=ResumabilityConfig(is_resumable=True))


def _strip(events):
    return [e for e in simplify_all(events) if e[1][0] != "actions"]


async def _events(app: App, agents_queue: str | None) -> tuple[Any, list]:
    rt = EmbeddedRuntime(AppRegistry([app]), agents_queue=agents_queue)
    inv = await rt.enqueue(app_name=app.name, user_id="u", new_message="go")
    rec = await rt.wait(app.name, inv, timeout=5, until=InvocationStatus.FINISHED)
    return (rec.status, rec.error), _strip(await rt.events(app.name, inv))


@pytest.mark.parametrize("build", [transfer_then_child_skips, child_transfers_to_peer,
                                   child_transfers_to_parent])
@pytest.mark.parametrize("resumable", [False, True])
async def test_llm_tree(build: Callable, resumable: bool):
    in_process = await _events(build(False, resumable), "agents")
    on_workers = await _events(build(True, resumable), "agents")
    assert on_workers == in_process


@pytest.mark.parametrize("build", [sequence_skip, parallel_skip, seq_transfer_in_step])
@pytest.mark.parametrize("agents_queue", [None, "agents"])
async def test_workflows(build: Callable, agents_queue):
    in_process = await _events(build(False, True), agents_queue)
    on_workers = await _events(build(True, True), agents_queue)
    assert on_workers == in_process


def plain(tool_context: ToolContext) -> dict[str, Any]:
    return {"plain": 1}


def transfer_then_child_plain(on_workers: bool, resumable: bool) -> App:
    child = LlmAgent(name="child", model=ScriptedLlm(responses=[call("plain"), "CHILD SUMMARY"]),
                     tools=[_tool(plain, on_workers)])
    root = LlmAgent(name="root", model=ScriptedLlm(responses=[call("transfer_to_agent", agent_name="child"), "ROOT AGAIN"]),
                    sub_agents=[child])
    return _app(root, resumable)


@pytest.mark.parametrize("resumable", [False, True])
async def test_plain_in_child(resumable):
    in_process = await _events(transfer_then_child_plain(False, resumable), "agents")
    on_workers = await _events(transfer_then_child_plain(True, resumable), "agents")
    assert on_workers == in_process
    # The child answers, as in google-adk; in a resumable app the child took the root's
    # transfer for a call of its own to continue and ran the root again ('ROOT AGAIN'),
    # in process as on workers.
    assert in_process[1][-1] == ("child", "CHILD SUMMARY")
