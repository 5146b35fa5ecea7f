"""Under a root LlmAgent a transfer ends the run of the agent that makes it, on every backend.

google-adk 2.13 runs a root LlmAgent in its node runtime, whose scheduler drives transfers:
the agent that transfers ends its run at the transfer, without its after-agent callbacks
(nor the plugins'); in a resumable app its ``end_of_agent`` comes right after the
transfer's response; the target runs next. The ``relay`` apps (tests/apps_transfers.py)
transfer twice, the second time with the answer of a tool sent to workers, then wait for a
human: the same events and state in process and on each backend (in process, and a real
orchestrator and worker over Redis), and google-adk's.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from orchestrator import InMemoryRunner
from orchestrator.distributed.models import InvocationStatus
from tests.apps_transfers import relay_app, relay_resumable_app
from tests.support.events import function_response, simplify, user_text

END = ("actions", {"end_of_agent": True})


def _callbacks(name: str, kind: str, n: int = 1) -> tuple[Any, ...]:
    delta = {f"p{kind}_{name}": n, f"{kind}_{name}": n}
    return (name, ("actions", {"state_delta": delta}), delta)


def _adk_relay(resumable: bool) -> list[tuple[Any, ...]]:
    """What google-adk 2.13 commits for the relay (measured with the tools in process;
    the answer sent with a second run_async), the human's answer left out."""
    def ended(name: str) -> list[tuple[Any, ...]]:
        return [(name, END, {})] if resumable else []

    return [
        _callbacks("root", "b"),
        ("root", ("call", "transfer_to_agent", {"agent_name": "child"}), {}),
        ("root", ("response", "transfer_to_agent", {"result": None}), {}),
        *ended("root"),
        _callbacks("child", "b"),
        ("child", ("call", "plain", {}), {}),
        ("child", ("response", "plain", {"plain": 1}), {}),
        ("child", ("call", "to_peer", {}), {}),
        ("child", ("response", "to_peer", {"routed": True}), {}),
        *ended("child"),
        _callbacks("peer", "b"),
        ("peer", ("call", "ask", {"what": "p"}), {}),
        _callbacks("peer", "a"),  # the long-running call's pause ends peer's run
        _callbacks("peer", "b", 2),
        ("peer", "PEER DONE", {}),
        *ended("peer"),
        _callbacks("peer", "a", 2),
    ]


ADK_RELAY_STATE = {"pb_root": 1, "b_root": 1, "pb_child": 1, "b_child": 1,
                   "pb_peer": 2, "b_peer": 2, "pa_peer": 2, "a_peer": 2}
"""The session's state google-adk 2.13 leaves: no after-callback of root or child ran."""


def _shown(events: list[Any]) -> list[tuple[Any, ...]]:
    """Each agent's event: author, what it says (or its actions), and its state delta."""
    return [(*simplify(e), dict(e.actions.state_delta)) for e in events if e.author != "user"]


def _state(events: list[Any]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for event in events:
        state.update(event.actions.state_delta)
    return state


def _ask_id(events: list[Any]) -> str | None:
    return next((c.id for e in events for c in e.get_function_calls() if c.name == "ask"), None)


async def _in_process(app: Any) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    runner = InMemoryRunner(app=app)
    session = await runner.session_service.create_session(app_name=app.name, user_id="u")
    events = [e async for e in runner.run_async(
        user_id="u", session_id=session.id, new_message=user_text("go"))]
    answer = function_response(_ask_id(events), "ask", {"ok": True})
    events += [e async for e in runner.run_async(
        user_id="u", session_id=session.id, new_message=answer)]
    session = await runner.session_service.get_session(
        app_name=app.name, user_id="u", session_id=session.id)
    assert _state(events) == dict(session.state)
    return _shown(events), dict(session.state)


async def _distributed(backend: Any, app: str) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    inv = await backend.enqueue(app, "u", "go")
    deadline = time.monotonic() + 30
    while True:  # past the pauses for workers, to the human's
        record = await backend.wait(app, inv)
        assert record.status is not InvocationStatus.FAILED, record.error
        ask = _ask_id(await backend.events(app, inv))
        if record.status is InvocationStatus.PAUSED and ask in record.pending_calls:
            break
        assert time.monotonic() < deadline, f"never waited for the human: {record}"
        await asyncio.sleep(0.02)
    await backend.answer(app, inv, ask, {"ok": True})
    record = await backend.wait(app, inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events(app, inv)
    return _shown(events), _state(events)


@pytest.mark.parametrize("app", [relay_app, relay_resumable_app], ids=lambda a: a.name)
async def test_transfers_end_the_runs_that_make_them_as_in_process(backend, app):
    """Before, root's and child's after-callbacks ran when the agents they transferred to
    were done (each after peer's, so at the end), in process as on workers."""
    resumable = app is relay_resumable_app
    in_process = await _in_process(app)
    assert in_process == (_adk_relay(resumable), ADK_RELAY_STATE)
    assert await _distributed(backend, app.name) == in_process


@pytest.mark.parametrize("failpoint", ["transfer.answered", "runner.transfer_hop"])
def test_an_orchestrator_killed_between_a_transfer_and_its_target(redis_url, failpoint):
    """A real orchestrator is killed once root's transfer is committed (before root's end,
    or after it); its heir recovers the invocation from the log: root's run ends once, with
    no after-callback, child starts once, and the rest goes on as in process."""
    from contextlib import ExitStack

    from tests.apps_transfers import TRANSFER_APP_SPECS
    from tests.support.processes import start_celery_process
    from tests.test_crash_recovery import _doomed_orchestrator, _stack, _wait_dead

    app = relay_resumable_app
    url, env, armed = _stack(redis_url, 8, f"{failpoint}=kill", apps=TRANSFER_APP_SPECS)
    with ExitStack() as stack:
        doomed, client = _doomed_orchestrator(stack, url, env, armed, TRANSFER_APP_SPECS)
        inv = client.enqueue(app.name, "u", "go")
        _wait_dead(doomed)
        assert simplify(client.events(app.name, inv)[-1])[0] == "root"  # child had not started
        heir = start_celery_process("orchestrator", "heir", env)
        stack.callback(heir.stop)
        deadline = time.monotonic() + 40
        while True:  # past the pauses for workers, to the human's
            record = client.wait(app.name, inv, timeout=40)
            ask = _ask_id(client.events(app.name, inv))
            if record.status is InvocationStatus.PAUSED and ask in record.pending_calls:
                break
            assert record.status is not InvocationStatus.FAILED, record.error
            assert time.monotonic() < deadline, f"never waited for the human: {record}"
            time.sleep(0.05)
        client.answer(app.name, inv, ask, {"ok": True})
        record = client.wait(app.name, inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record, heir.output())
        events = client.events(app.name, inv)
    assert (_shown(events), _state(events)) == (_adk_relay(True), ADK_RELAY_STATE)
