"""An orchestrator killed while a ParallelAgent's branches run in it: the heir finishes each branch once.

A resumable app (tests/apps_fan.py) whose branches run in process (``ADK_CELERY_AGENTS_QUEUE``
empty): ``left`` waits for a tool on workers, ``mid`` runs a tool in process, ``right``
answers at once. The orchestrator is killed (``kill -9`` at a failpoint) with every branch
under way; the one that takes the session over must continue each where the log leaves it:
no branch's model asked again after its answer, no before_agent callback run twice, no
after_agent callback lost. Events (each branch's in order) and state equal the run that
never stopped. The in-process matrix of such stops is ``test_recovery_matrix_workflows.py``.
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from typing import Any

import pytest

from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from tests.apps_fan import FAN_APP_SPECS, fan_app
from tests.support.events import simplify
from tests.support.processes import start_celery_process
from tests.test_crash_recovery import _doomed_orchestrator, _stack, _wait_dead

BRANCHES = ("left", "mid", "right")


def _outcome(events: list[Any]) -> tuple[list[Any], dict[str, list[Any]], dict[str, Any]]:
    """The events outside the branches in order, each branch's in order, and the state."""
    shown = [(*simplify(e), dict(e.actions.state_delta)) for e in events]
    branches: dict[str, list[Any]] = {name: [] for name in BRANCHES}
    rest = [event for event in shown if event[0] not in branches
            or branches[event[0]].append(event)]
    state: dict[str, Any] = {}
    for event in events:
        state.update(event.actions.state_delta)
    return rest, branches, state


async def _uninterrupted() -> list[Any]:
    rt = EmbeddedRuntime(AppRegistry([fan_app]), agents_queue=None)
    inv = await rt.enqueue(app_name="fan", user_id="u", new_message="go")
    record = await rt.wait("fan", inv, timeout=10, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    return await rt.events("fan", inv)


@pytest.mark.parametrize("failpoint", [
    "after_agent.right=kill",  # right ended (end_of_agent committed), its callbacks not run
    "flow.calls_committed=kill",  # a branch's call committed, the others under way
    # left's call committed, its job not sent (sent after the commit: fast publish off)
    "dispatch.before_publish=kill",
])
def test_an_orchestrator_killed_among_in_process_branches_finishes_each_once(redis_url, failpoint):
    url, env, armed = _stack(redis_url, 8, failpoint, apps=FAN_APP_SPECS, agents_queue="",
                             job_lost_after_seconds="1", watchdog_interval_seconds="0.2")
    if failpoint.startswith("dispatch."):
        armed["ADK_CELERY_FAST_PUBLISH"] = "false"
    with ExitStack() as stack:
        doomed, client = _doomed_orchestrator(stack, url, env, armed, FAN_APP_SPECS)
        inv = client.enqueue("fan", "u", "go")
        _wait_dead(doomed)
        heir = start_celery_process("orchestrator", "heir", env)
        stack.callback(heir.stop)
        record = client.wait("fan", inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record, heir.output())
        recovered = _outcome(client.events("fan", inv))
    assert recovered == _outcome(asyncio.run(_uninterrupted()))
