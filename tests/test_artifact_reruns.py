"""A tool run twice (its worker killed after it saved, before its result was stored) saves once.

The ``reports`` app's tool saves ``report.txt`` and ``user:notes.txt`` on a worker. Its
first worker is killed at ``worker.before_store``; the watchdog sends the call again, and
the tool runs a second time on another worker. Each of its saves names itself by the call
(orchestrator/artifacts/save_ids.py): the second run's save gets the version the first
made, so each file has one version, the one the committed answer records (before, each
file had two, the first recorded by no event).
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack

import redis

from config import Settings
from orchestrator.backends.redis.artifact_service import RedisArtifactService
from orchestrator.distributed.models import InvocationStatus
from tests.apps_artifacts import APP_SPECS, starts_key
from tests.support.processes import stack_env, start_celery_process


async def _versions(url: str, session_id: str) -> dict[str, list[int]]:
    service = RedisArtifactService(url)
    try:
        return {name: await service.list_versions(
            app_name="reports", user_id="ann", session_id=session_id, filename=name)
            for name in ("report.txt", "user:notes.txt")}
    finally:
        await service.aclose()


def test_a_tool_run_again_after_its_worker_died_saves_each_artifact_once(redis_url):
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + "/9"
    check = redis.Redis.from_url(url, decode_responses=True)
    check.flushdb()
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2", job_heartbeat_seconds="0.5",
                    job_lost_after_seconds="2", watchdog_interval_seconds="0.5")
    with ExitStack() as stack:
        stack.callback(check.close)
        orchestrator = start_celery_process("orchestrator", "art-orch", env)
        stack.callback(orchestrator.stop)
        doomed = start_celery_process("worker", "art-doomed",
                                      {**env, "ADK_CELERY_FAILPOINTS": "worker.before_store=kill"},
                                      concurrency=1)
        stack.callback(doomed.stop)
        client = Client(Settings(redis_url=url, apps=APP_SPECS))
        stack.callback(client.close)

        inv = client.enqueue("reports", "ann", "Q3")
        doomed.proc.wait(30)  # killed by its failpoint, the tool's saves done
        assert doomed.proc.returncode == -9, doomed.output()
        heir = start_celery_process("worker", "art-heir", env, concurrency=1)
        stack.callback(heir.stop)
        record = client.wait("reports", inv, timeout=40, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, orchestrator.output())
        assert check.get(starts_key(inv)) == "2"  # the tool did run twice

        [answer] = [e for e in client.events("reports", inv) if e.get_function_responses()]
        assert answer.actions.artifact_delta == {"report.txt": 0, "user:notes.txt": 0}
        assert answer.get_function_responses()[0].response == {"version": 0}
    assert asyncio.run(_versions(url, record.session_id)) == {
        "report.txt": [0], "user:notes.txt": [0]}
