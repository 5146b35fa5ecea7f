"""Synchronous tools of one turn, or of parallel branches, all run at once.

Each tool waits on a barrier of ``N`` (one more than Python's default executor has threads,
at least 8): on a pool of fewer threads they would run in turns, the barrier would break and
the tools would answer "waited alone". Nothing here measures time; bench/fan_out.py does.
"""

from __future__ import annotations

import redis

from config import Settings
from orchestrator import InMemoryRunner, RunConfig
from orchestrator.agents.run_config import ToolThreadPoolConfig
from orchestrator.distributed.models import InvocationStatus
from tests.apps_threads import APP_SPECS, N, fan_out_root, one_turn_agent
from tests.support.events import user_text
from tests.support.processes import stack_env, start_celery_process


def answers(events) -> list[str]:
    return sorted(r.response["result"] for e in events for r in e.get_function_responses()
                  if r.name == "rendezvous")


def met(prefix: str, count: int) -> list[str]:
    return sorted(f"{prefix}{i} met the others" for i in range(count))


async def _run(agent, run_config=None):
    runner = InMemoryRunner(agent)
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    kwargs = {"run_config": run_config} if run_config is not None else {}
    return [e async for e in runner.run_async(user_id="u", session_id=session.id,
                                              new_message=user_text("go"), **kwargs)]


async def test_the_sync_calls_of_one_turn_run_at_once_in_process():
    events = await _run(one_turn_agent())
    assert answers(events) == met("call.", N)


async def test_parallel_branches_with_sync_tools_run_at_once_in_process():
    events = await _run(fan_out_root())
    assert answers(events) == sorted(f"b{i}.0 met the others" for i in range(N))


async def test_a_runs_own_tool_thread_pool_is_used_and_can_be_too_small():
    import threading

    from tests import apps_threads

    # Big enough: everyone meets.
    events = await _run(one_turn_agent(), RunConfig(tool_thread_pool_config=ToolThreadPoolConfig(max_workers=N)))
    assert answers(events) == met("call.", N)
    # One thread short (google-adk's meaning of max_workers): the calls cannot all meet. A
    # fresh, short-lived barrier, so the shared one stays whole for the other tests.
    saved = apps_threads._barrier
    apps_threads._barrier = threading.Barrier(N, timeout=1.0)
    try:
        events = await _run(one_turn_agent(), RunConfig(
            tool_thread_pool_config=ToolThreadPoolConfig(max_workers=N - 1)))
    finally:
        apps_threads._barrier = saved
    assert all(a.endswith("waited alone") for a in answers(events))


def test_on_workers_branches_and_one_turns_remote_calls_run_at_once(redis_url):
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + "/5"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, tool_queues='{"rendezvous": "adk.tools"}')
    orchestrator = start_celery_process("orchestrator", "threads-orch", env)
    # Enough pool threads for N jobs at once (each branch or call is one Celery job).
    worker = start_celery_process("worker", "threads-work", env, concurrency=N)
    client = Client(Settings(redis_url=url, apps=APP_SPECS))
    try:
        outcomes = {}
        for app in ("threads_fanout", "threads_turn"):
            invocation = client.enqueue(app, "u", "go")
            record = client.wait(app, invocation, timeout=120, until=InvocationStatus.FINISHED)
            assert record.status is InvocationStatus.COMPLETED, record.error
            outcomes[app] = answers(client.events(app, invocation))
    finally:
        client.close()
        orchestrator.stop()
        worker.stop()
    assert outcomes["threads_fanout"] == sorted(f"b{i}.0 met the others" for i in range(N))
    assert outcomes["threads_turn"] == met("call.", N)

