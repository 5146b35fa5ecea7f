"""An orchestrator stopped gracefully hands its unfinished sessions over at once."""

from __future__ import annotations

import signal
import time

import redis

from bench._fairness_apps import APP, APP_SPECS
from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.support.processes import stack_env, start_celery_process


def test_a_session_whose_drain_outlasts_a_warm_stop_is_taken_over_at_once(redis_url):
    # The model thinks 14 s; the stopping orchestrator gives drains 10 s, then cancels them.
    # Its wake-ups stayed pending on it and another orchestrator took the session only once
    # they had been idle a lease's time to live (30 s by default): ~44 s, not ~24 s.
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + "/12"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2")  # the default lease TTL
    stopping = start_celery_process("orchestrator", "stopping", env)
    client = Client(Settings(redis_url=url, apps=APP_SPECS))
    heir = None
    try:
        inv = client.enqueue(APP, "u", "think 14000 hello")
        assert client.wait(APP, inv, timeout=20, until={InvocationStatus.RUNNING}).status \
            is InvocationStatus.RUNNING
        heir = start_celery_process("orchestrator", "heir", env)
        stopping.proc.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()

        record = client.wait(APP, inv, timeout=34, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record
        assert time.monotonic() - stopped_at < 34
        assert stopping.proc.wait(20) is not None
    finally:
        client.close()
        stopping.stop()
        if heir is not None:
            heir.stop()
