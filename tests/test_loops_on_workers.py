"""A resumable LoopAgent whose agents call tools on workers runs each iteration afresh.

A tool routed to workers pauses the invocation; the run that continues it rebuilds the
agents' checkpoints and end flags from the log. The agents below a LoopAgent start afresh
on each iteration, so an agent that ended in iteration 1 is under way again in iteration
2. Before, it stayed ended in the rebuild: its tool answer in iteration 2 was committed
and its model never asked again (its answer given once, not twice), the loop's and the
sequence's before-callbacks ran again at every continuation, and an orchestrator killed as
the answer was committed left an heir that ran the agent's before-callback again.

Real processes (an orchestrator and a worker over Redis); the expected events and state
are those of the same app with its tool in process (tests/apps_loops.py).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import ExitStack
from typing import Any

from config import Settings
from orchestrator import App, InMemoryRunner
from orchestrator.distributed.models import InvocationStatus
from tests.apps_loops import LOOP_APP_SPECS, loop_of_sequence, loop_then_call
from tests.support.events import user_text
from tests.support.processes import start_celery_process
from tests.test_crash_recovery import _doomed_orchestrator, _stack, _wait_dead
from tests.test_transfers_on_workers import _shown, _state


def _texts(shown: list[tuple[Any, ...]]) -> Counter[str]:
    return Counter(what for _, what, _ in shown if isinstance(what, str))


async def _in_process(app: App) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    runner = InMemoryRunner(app=app)
    session = await runner.session_service.create_session(app_name=app.name, user_id="u")
    events = [e async for e in runner.run_async(
        user_id="u", session_id=session.id, new_message=user_text("go"))]
    return _shown(events), _state(events)


def _finished(client: Any, app: str, inv: str, process: Any) -> list[Any]:
    record = client.wait(app, inv, timeout=40, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, (record, process.output())
    return client.events(app, inv)


def test_each_iteration_runs_its_agents_again_on_workers(redis_url):
    expected = asyncio.run(_in_process(loop_of_sequence(False)))
    shown, state = expected
    assert _texts(shown) == {"A answered": 2, "B answered": 2, "C": 2}
    assert {k: v for k, v in state.items() if k.startswith("b_")} == {
        "b_loop": 1, "b_seq": 2, "b_a": 2, "b_b": 2, "b_c": 2}

    url, env, _ = _stack(redis_url, 8, "", apps=LOOP_APP_SPECS)
    with ExitStack() as stack:
        orchestrator = start_celery_process("orchestrator", "loops", env)
        stack.callback(orchestrator.stop)
        worker = start_celery_process("worker", "loops-worker", env)
        stack.callback(worker.stop)
        from workers.client import Client

        client = Client(Settings(redis_url=url, apps=LOOP_APP_SPECS, lease_retry_seconds=0.2))
        stack.callback(client.close)
        inv = client.enqueue("loop_of_sequence", "u", "go")
        events = _finished(client, "loop_of_sequence", inv, orchestrator)
    assert (_shown(events), _state(events)) == expected


def test_an_orchestrator_killed_as_an_answer_of_iteration_two_is_committed(redis_url):
    expected = asyncio.run(_in_process(loop_then_call(False)))
    assert expected[1]["b_w"] == 2

    url, env, armed = _stack(redis_url, 8, "runner.answers_committed=kill", apps=LOOP_APP_SPECS)
    with ExitStack() as stack:
        doomed, client = _doomed_orchestrator(stack, url, env, armed, LOOP_APP_SPECS)
        inv = client.enqueue("loop_then_call", "u", "go")
        _wait_dead(doomed)
        heir = start_celery_process("orchestrator", "heir", env)
        stack.callback(heir.stop)
        events = _finished(client, "loop_then_call", inv, heir)
    assert (_shown(events), _state(events)) == expected
