"""Fair sharing over real processes: a flood of messages on one session delays no other session.

One orchestrator with 8 slots; 200 messages are queued on one session, each taking the model
20 ms. Before, every one of those messages posted a wake-up that took a slot and waited for
the session's lease, so the invocations of other sessions waited for the whole flood.
"""

from __future__ import annotations

import time

import pytest
import redis

from bench._fairness_apps import APP, APP_SPECS
from config import Settings
from orchestrator.backends.redis import keys
from orchestrator.distributed.models import InvocationStatus
from tests.support.processes import stack_env, start_celery_process

USER = "u"
FLOOD = 200
THINK_MS = 20


@pytest.fixture(scope="module")
def stack(redis_url):
    """Redis db 14, one orchestrator with 8 slots, and a client."""
    url = redis_url.rsplit("/", 1)[0] + "/14"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2", orchestrator_concurrency="8")
    orchestrator = start_celery_process("orchestrator", "orch-fair", env)
    from workers.client import Client

    client = Client(Settings(redis_url=url, apps=APP_SPECS, lease_retry_seconds=0.2))
    check = redis.Redis.from_url(url, decode_responses=True)
    try:
        yield client, check, orchestrator
    finally:
        client.close()
        check.close()
        orchestrator.stop()


def _until(condition, what: str, timeout: float = 30.0) -> None:
    """Poll a condition until it holds (with a deadline)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_flood_on_one_session_does_not_delay_other_sessions(stack):
    client, check, orchestrator = stack
    flooded = client.create_session(APP, USER).id
    flood = [client.enqueue(APP, USER, f"think {THINK_MS} flood {i}", session_id=flooded)
             for i in range(FLOOD)]
    backlog = keys.session_queue(APP, USER, flooded)

    for n in range(5):
        start = time.monotonic()
        invocation_id = client.enqueue(APP, USER, f"hello {n}")  # a session of its own
        record = client.wait(APP, invocation_id, timeout=60, until=InvocationStatus.FINISHED)
        elapsed = time.monotonic() - start
        assert record is not None and record.status is InvocationStatus.COMPLETED, record
        left = check.llen(backlog)
        # Answered while most of the flood still waits, not after it (about 5 s of work).
        assert left > FLOOD // 4, (
            f"the invocation on another session took {elapsed:.2f} s and completed with "
            f"only {left} flooded messages left")
        assert elapsed < 2.0, f"the invocation on another session took {elapsed:.2f} s"

    # The flood itself is all answered, the last message last, and no wake-up is left over.
    last = client.wait(APP, flood[-1], timeout=120, until=InvocationStatus.FINISHED)
    assert last is not None and last.status is InvocationStatus.COMPLETED, last
    assert all(client.status(APP, i).status is InvocationStatus.COMPLETED for i in flood)
    assert [e.content.parts[0].text for e in client.events(APP, flood[-1])
            if e.author == "agent"] == [f"reply to think {THINK_MS} flood {FLOOD - 1}"]
    wake_stream = keys.wake_stream("adk.invocations")
    _until(lambda: check.xlen(wake_stream) == 0, "every wake-up acknowledged")
    assert "Traceback" not in orchestrator.output()
