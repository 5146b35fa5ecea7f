"""A workflow run stopped at any failpoint, then recovered, ends as one that never stopped.

The transfer chains' matrix (``test_recovery_matrix.py``) for workflow agents: a
SequentialAgent over a ParallelAgent of three branches (a tool on workers, a tool in process,
a plain answer) and a last agent, and a LoopAgent whose agent escalates in its second
iteration. ParallelAgent branches run both ways: as branch jobs ("workers") and in the
orchestrator's own process. Every agent has before/after callbacks counting into state (the
after callbacks meet ``after_agent.<name>`` first) and a plugin counting too. Each run is
stopped at the Nth hit of one failpoint, the next holder recovers it, a second message
follows; status, events, the second message's end and the state must equal those of the run
that never stopped.

In process (the embedded runtime); the real-process kills of these paths are in
``test_crash_recovery.py`` and ``test_agent_callbacks_on_workers.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from orchestrator import App, LoopAgent, ParallelAgent, SequentialAgent, failpoints
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.errors import FailpointError
from tests.apps_transfers import count_after, count_before
from tests.support.events import call
from tests.test_agent_callbacks_on_workers import _quiet
from tests.test_recovery_matrix import _app, _llm, _outcome, _stopping, _tool, plain


def escalate(tool_context: Any) -> dict[str, Any]:
    """Ends the loop around the agent that calls it."""
    tool_context.actions.escalate = True
    return {"escalated": True}


def _workflow(kind: type, name: str, sub_agents: list[Any], **fields: Any) -> Any:
    return kind(name=name, sub_agents=sub_agents, before_agent_callback=count_before,
                after_agent_callback=[_stopping(name), count_after], **fields)


def fan_then_last(on_workers: bool) -> App:
    """seq[par[left: a tool (on workers), mid: a tool in process, right: an answer], last]."""
    left = _llm("left", [call("plain"), "LEFT"], (_tool(plain, on_workers),))
    mid = _llm("mid", [call("plain"), "MID"], (_tool(plain, False),))
    right = _llm("right", ["RIGHT"])
    par = _workflow(ParallelAgent, "par", [left, mid, right])
    last = _llm("last", [call("plain"), "LAST"], (_tool(plain, on_workers),))
    return _app(_workflow(SequentialAgent, "seq", [par, last]), True)


def escalating_loop(on_workers: bool) -> App:
    """loop[agent]: a tool call and an answer, then an escalating call in the second round."""
    agent = _llm("agent", [call("plain"), "ONE", call("escalate"), "TWO"],
                 (_tool(plain, on_workers), _tool(escalate, on_workers)))
    return _app(_workflow(LoopAgent, "loop", [agent], max_iterations=3), True)


def loop_of_sequence(on_workers: bool) -> App:
    """loop[seq[a, b], c] twice: a and b each make a call in every iteration."""
    a = _llm("a", [call("plain"), "A1", call("plain"), "A2"], (_tool(plain, on_workers),))
    b = _llm("b", [call("plain"), "B1", call("plain"), "B2"], (_tool(plain, on_workers),))
    c = _llm("c", ["C1", "C2"])
    seq = _workflow(SequentialAgent, "seq", [a, b])
    return _app(_workflow(LoopAgent, "loop", [seq, c], max_iterations=2), True)


Build = Callable[[bool], App]

BRANCHES = ("left", "mid", "right")


def _by_branch(shown: list[tuple[Any, ...]]) -> tuple[list[Any], dict[str, list[Any]]]:
    """Events with each branch's apart: branches run side by side, their order is the race's."""
    branches: dict[str, list[Any]] = {name: [] for name in BRANCHES}
    rest = [event for event in shown if event[0] not in branches
            or branches[event[0]].append(event)]
    return rest, branches


def _compared(outcome: tuple[Any, ...]) -> tuple[Any, ...]:
    status, first, second_status, second, state = outcome
    return status, _by_branch(first), second_status, _by_branch(second), state


async def _uninterrupted(app: App, agents_queue: str | None) -> tuple[Any, ...]:
    rt = EmbeddedRuntime(AppRegistry([app]), agents_queue=agents_queue)
    invocation_id = await rt.enqueue(app_name=app.name, user_id="u", new_message="go")
    record = await rt.wait(app.name, invocation_id, timeout=5, until=InvocationStatus.FINISHED)
    return _compared(await _outcome(rt, app, invocation_id, record))


def _failing_at(rt: EmbeddedRuntime, name: str, nth: int) -> tuple[Callable[[str], None], dict]:
    """``failpoints.hit`` whose Nth hit of ``name`` by the orchestrator fails.

    Hits inside the embedded runtime's jobs (a branch run as a job) are a worker's: they
    pass, as a worker's death is not an orchestrator's stop (the real-process tests kill
    workers).
    """
    real, seen = failpoints.hit, {"hits": 0}

    def hit(hit_name: str) -> None:
        if hit_name == name and asyncio.current_task() not in rt.transport._tasks:
            seen["hits"] += 1
            if seen["hits"] == nth:
                raise FailpointError(f"failpoint {hit_name}")
        real(hit_name)

    return hit, seen


async def _recovered(app: App, agents_queue: str | None, point: str, nth: int,
                     monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...] | None:
    """The outcome of ``app`` stopped at the ``nth`` hit of ``point``; None if not hit."""
    rt = EmbeddedRuntime(AppRegistry([app]), agents_queue=agents_queue)
    hit, seen = _failing_at(rt, point, nth)
    monkeypatch.setattr(failpoints, "hit", hit)
    invocation_id = await rt.enqueue(app_name=app.name, user_id="u", new_message="go")
    await _quiet(rt)
    monkeypatch.undo()  # the recovery meets no failpoint
    if seen["hits"] < nth:
        return None
    record = await rt.status(app.name, invocation_id)
    if not record.status.is_finished:
        await rt.service.drain((app.name, "u", record.session_id))  # the next holder
    record = await rt.wait(app.name, invocation_id, timeout=5, until=InvocationStatus.FINISHED)
    return _compared(await _outcome(rt, app, invocation_id, record))


POINTS = ["dispatch.before_publish", "dispatch.after_one_branch", "runner.answers_committed",
          "flow.calls_committed", "orchestrator.start.before_save",
          "orchestrator.resume.before_save", "orchestrator.before_run", "after_agent.left",
          "after_agent.mid", "after_agent.right", "after_agent.par", "after_agent.last",
          "after_agent.seq", "after_agent.agent", "after_agent.loop", "after_agent.a",
          "after_agent.b", "after_agent.c"]

SHAPES = {"fan-branch-jobs": (fan_then_last, "agents"), "fan-in-process": (fan_then_last, None),
          "loop": (escalating_loop, "agents"), "loop-of-seq": (loop_of_sequence, "agents")}

CASES = [pytest.param(*SHAPES[shape], point, nth, id=f"{nth}-{point}-{shape}")
         for nth in (1, 2, 3, 4) for point in POINTS for shape in SHAPES]


@pytest.mark.parametrize(("build", "agents_queue", "point", "nth"), CASES)
async def test_a_stop_anywhere_in_a_workflow(build, agents_queue, point, nth, monkeypatch):
    expected = await _uninterrupted(build(True), agents_queue)
    assert expected == await _uninterrupted(build(False), agents_queue)
    recovered = await _recovered(build(True), agents_queue, point, nth, monkeypatch)
    if recovered is None:
        pytest.skip(f"{point} is hit fewer than {nth} times")
    assert recovered == expected
