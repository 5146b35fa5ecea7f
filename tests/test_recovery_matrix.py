"""A run stopped at any failpoint of a transfer chain, then recovered, ends as one that never stopped.

Apps whose LlmAgents transfer (down, to a peer, back to the root, with a worker's answer,
under a SequentialAgent), their plain tools on workers, every agent with before/after
callbacks and a plugin counting into state. Each is stopped at the Nth hit of one failpoint
(the drain that meets it fails, as if its orchestrator were killed there), the next holder
recovers it, and a second message follows. The invocation's status, its events, the second
message's status and events (who it goes to) and the final state must equal those of the
same app run without a stop (itself equal to the app with its tools in process).

In process (the embedded runtime): the real-process kills of these paths are in
``test_crash_recovery.py`` and ``test_transfers_on_workers.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from orchestrator import App, FunctionTool, LlmAgent, ResumabilityConfig, SequentialAgent, failpoints
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.models.fake import ScriptedLlm
from tests.apps_transfers import CountingPlugin, count_after, count_before
from tests.support.action_tools import remote
from tests.support.events import call
from tests.test_agent_callbacks_on_workers import _quiet, _shown, failing_at

Build = Callable[[bool, bool], App]


def plain() -> dict[str, Any]:
    return {"plain": 1}


def to_peer(tool_context: Any) -> dict[str, Any]:
    tool_context.actions.transfer_to_agent = "peer"
    return {"routed": True}


def to_root(tool_context: Any) -> dict[str, Any]:
    tool_context.actions.transfer_to_agent = "root"
    return {"routed": True}


def _tool(func: Callable[..., Any], on_workers: bool) -> FunctionTool:
    return remote(func) if on_workers else FunctionTool(func)


def _stopping(name: str) -> Callable[[Any], None]:
    """An after_agent callback that meets the failpoint ``after_agent.<name>`` first."""
    def stop(callback_context: Any) -> None:
        failpoints.hit(f"after_agent.{name}")
    return stop


def _llm(name: str, script: list[Any], tools: tuple[FunctionTool, ...] = (), **fields: Any) -> LlmAgent:
    # One answer more than the script: a model asked again says so in the events.
    return LlmAgent(name=name, model=ScriptedLlm(responses=[*script, f"{name.upper()} NEXT"]),
                    tools=list(tools), before_agent_callback=count_before,
                    after_agent_callback=[_stopping(name), count_after], **fields)


def _app(root: Any, resumable: bool) -> App:
    return App(name="a", root_agent=root, plugins=[CountingPlugin()],
               resumability_config=ResumabilityConfig(is_resumable=True) if resumable else None)


def chain(on_workers: bool, resumable: bool) -> App:
    """root -> child (a tool on workers) -> peer -> back to root, which answers."""
    child = _llm("child", [call("plain"), call("transfer_to_agent", agent_name="peer")],
                 (_tool(plain, on_workers),))
    peer = _llm("peer", [call("transfer_to_agent", agent_name="root")])
    root = _llm("root", [call("transfer_to_agent", agent_name="child"), "ROOT AGAIN"],
                sub_agents=[child, peer])
    return _app(root, resumable)


def worker_transfer(on_workers: bool, resumable: bool) -> App:
    """child's tool on workers transfers to peer with its answer; peer makes a remote call."""
    child = _llm("child", [call("plain"), call("to_peer")],
                 (_tool(plain, on_workers), _tool(to_peer, on_workers)))
    peer = _llm("peer", [call("plain"), "PEER"], (_tool(plain, on_workers),))
    root = _llm("root", [call("transfer_to_agent", agent_name="child")], sub_agents=[child, peer])
    return _app(root, resumable)


def worker_back_to_root(on_workers: bool, resumable: bool) -> App:
    """child's tool on workers transfers back to root, which makes a remote call of its own."""
    child = _llm("child", [call("to_root")], (_tool(to_root, on_workers),))
    root = _llm("root", [call("transfer_to_agent", agent_name="child"), call("plain"), "ROOT AGAIN"],
                (_tool(plain, on_workers),), sub_agents=[child])
    return _app(root, resumable)


def seq_transfers(on_workers: bool, resumable: bool) -> App:
    """Under a SequentialAgent root: a transfers to sub (a remote call), then b."""
    sub = _llm("sub", [call("plain"), "SUB"], (_tool(plain, on_workers),))
    first = _llm("a", [call("transfer_to_agent", agent_name="sub")], sub_agents=[sub])
    then = _llm("b", [call("plain"), "B"], (_tool(plain, on_workers),))
    return _app(SequentialAgent(name="seq", sub_agents=[first, then],
                                before_agent_callback=count_before,
                                after_agent_callback=[_stopping("seq"), count_after]), resumable)


def reentered_root_local_tool(on_workers: bool, resumable: bool) -> App:
    """child (a tool on workers) transfers back to root, whose next call runs in process."""
    child = _llm("child", [call("plain"), call("transfer_to_agent", agent_name="root")],
                 (_tool(plain, on_workers),))
    root = _llm("root", [call("transfer_to_agent", agent_name="child"), call("plain"), "ROOT AGAIN"],
                (FunctionTool(plain),), sub_agents=[child])
    return _app(root, resumable)


def ping_pong(on_workers: bool, resumable: bool) -> App:
    """root -> child -> root -> child: each agent runs twice in one invocation."""
    child = _llm("child", [call("plain"), call("transfer_to_agent", agent_name="root"),
                           call("plain"), "CHILD"], (_tool(plain, on_workers),))
    root = _llm("root", [call("transfer_to_agent", agent_name="child"),
                         call("transfer_to_agent", agent_name="child")], sub_agents=[child])
    return _app(root, resumable)


async def _outcome(rt: EmbeddedRuntime, app: App, invocation_id: str,
                   record: InvocationRecord) -> tuple[Any, ...]:
    """The invocation's end and events, a second message's end and events, the state."""
    first = _shown(await rt.events(app.name, invocation_id))
    again = await rt.enqueue(app_name=app.name, user_id="u", session_id=record.session_id,
                             new_message="again")
    second = await rt.wait(app.name, again, timeout=5, until=InvocationStatus.FINISHED)
    session = await rt.session_service.get_session(
        app_name=app.name, user_id="u", session_id=record.session_id)
    assert session is not None
    return ((record.status, record.error), first, (second.status, second.error),
            _shown(await rt.events(app.name, again)), dict(session.state))


async def _uninterrupted(app: App) -> tuple[Any, ...]:
    rt = EmbeddedRuntime(AppRegistry([app]))
    invocation_id = await rt.enqueue(app_name=app.name, user_id="u", new_message="go")
    record = await rt.wait(app.name, invocation_id, timeout=5, until=InvocationStatus.FINISHED)
    return await _outcome(rt, app, invocation_id, record)


async def _recovered(app: App, point: str, nth: int,
                     monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...] | None:
    """The outcome of ``app`` stopped at the ``nth`` hit of ``point``; None if not hit."""
    hit, seen = failing_at(point, nth)
    monkeypatch.setattr(failpoints, "hit", hit)
    rt = EmbeddedRuntime(AppRegistry([app]))
    invocation_id = await rt.enqueue(app_name=app.name, user_id="u", new_message="go")
    await _quiet(rt)
    monkeypatch.undo()  # the recovery meets no failpoint
    if seen["hits"] < nth:
        return None
    record = await rt.status(app.name, invocation_id)
    if record.status is not InvocationStatus.COMPLETED:
        await rt.service.drain((app.name, "u", record.session_id))  # the next holder
    record = await rt.wait(app.name, invocation_id, timeout=5, until=InvocationStatus.FINISHED)
    return await _outcome(rt, app, invocation_id, record)


POINTS = ["transfer.answered", "runner.transfer_hop", "dispatch.before_publish",
          "runner.answers_committed", "flow.calls_committed", "orchestrator.start.before_save",
          "orchestrator.resume.before_save", "orchestrator.before_run", "after_agent.root",
          "after_agent.child", "after_agent.peer", "after_agent.sub", "after_agent.a",
          "after_agent.b", "after_agent.seq"]


async def _check(build: Build, resumable: bool, point: str, nth: int,
                 monkeypatch: pytest.MonkeyPatch) -> None:
    expected = await _uninterrupted(build(True, resumable))
    assert expected == await _uninterrupted(build(False, resumable))
    recovered = await _recovered(build(True, resumable), point, nth, monkeypatch)
    if recovered is None:
        pytest.skip(f"{point} is hit fewer than {nth} times")
    assert recovered == expected


@pytest.mark.parametrize("build", [chain, worker_transfer, worker_back_to_root, seq_transfers])
@pytest.mark.parametrize("resumable", [False, True])
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("nth", [1, 2, 3])
async def test_a_stop_anywhere_in_a_transfer_chain(build, resumable, point, nth, monkeypatch):
    if build is seq_transfers and not resumable:
        pytest.skip("a workflow agent with tools on workers must be resumable (refused)")
    await _check(build, resumable, point, nth, monkeypatch)


@pytest.mark.parametrize("resumable", [False, True])
@pytest.mark.parametrize("nth", [1, 2, 3, 4])
async def test_a_stop_after_a_call_of_a_root_reentered_by_a_transfer(resumable, nth, monkeypatch):
    await _check(reentered_root_local_tool, resumable, "flow.calls_committed", nth, monkeypatch)


@pytest.mark.parametrize("resumable", [False, True])
@pytest.mark.parametrize("point", POINTS[:7])
@pytest.mark.parametrize("nth", [1, 2, 3, 4])
async def test_a_stop_anywhere_when_agents_run_twice(resumable, point, nth, monkeypatch):
    await _check(ping_pong, resumable, point, nth, monkeypatch)
