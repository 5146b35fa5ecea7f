"""A worker killed in the middle of a tool call: the job runs again elsewhere, answered once.

Celery over Redis is at-least-once: the killed worker never acknowledged the job, so once the
visibility timeout has passed a live worker's sweep puts it back in the queue (here the
timeout is 2 s and workers sweep every second). The second run has the same call id; its
result is the one stored, the invocation resumes once, with one function response.
"""

from __future__ import annotations

import json
from contextlib import ExitStack

import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.apps_extra import APP_SPECS, gate_key, runs_key
from tests.support.processes import stack_env, start_celery_process


def test_a_job_whose_worker_was_killed_runs_again_and_is_answered_once(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/7"
    check = redis.Redis.from_url(url, decode_responses=True, socket_timeout=60)  # long BLPOPs
    check.flushdb()
    env = stack_env(
        url, APP_SPECS, lease_retry_seconds="0.2", visibility_timeout_seconds="2",
        broker_transport_options=json.dumps({"unacked_restore_interval": 1,
                                             "unacked_restore_throttle": 1}),
    )
    from workers.client import Client

    with ExitStack() as stack:
        stack.callback(check.close)
        orchestrator = start_celery_process("orchestrator", "crash-orch", env)
        stack.callback(orchestrator.stop)
        first = start_celery_process("worker", "crash-work-1", env)
        stack.callback(first.stop)
        client = Client(Settings(redis_url=url, apps=APP_SPECS, lease_retry_seconds=0.2))
        stack.callback(client.close)

        inv = client.enqueue("fragile", "u", "go")
        started = check.blpop([runs_key(inv)], timeout=15)
        assert started is not None, first.output()
        pid, call_id = started[1].split()
        assert int(pid) == first.pid  # the tool is running on the first worker ...
        first.kill()  # ... which dies without acknowledging the job

        second = start_celery_process("worker", "crash-work-2", env)
        stack.callback(second.stop)
        again = check.blpop([runs_key(inv)], timeout=30)  # redelivered once 2 s old
        assert again is not None, second.output()
        assert again[1] == f"{second.pid} {call_id}"  # the same call, on the live worker
        check.lpush(gate_key(inv), "test")

        record = client.wait("fragile", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        events = client.events("fragile", inv)
        responses = [r for e in events for r in e.get_function_responses()]
        assert [r.id for r in responses] == [call_id]  # answered once
        assert responses[0].response["pid"] == second.pid
        assert events[-1].content.parts[0].text == f"done on {second.pid} released=True"
        assert check.llen(runs_key(inv)) == 0  # no third run
