"""Celery's remote control is read-only: a broker client cannot stop, stall or steer the fleet.

A real redis-server, a real orchestrator and worker. Each command is sent the way any client
with broker access can (``app.control``), by name, to both processes.
"""

from __future__ import annotations

import redis
from celery import Celery

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.apps import APP_SPECS
from tests.support.processes import stack_env, start_celery_process

ACTING = ["shutdown", "rate_limit", "add_consumer", "cancel_consumer", "revoke", "terminate",
          "time_limit", "pool_grow", "pool_shrink", "autoscale", "disable_events", "memdump"]


def _replies(ctl: Celery, command: str, destination: list[str], **arguments) -> dict[str, dict]:
    replies = ctl.control.broadcast(command, arguments=arguments, destination=destination,
                                    reply=True, timeout=3)
    return {name: reply for item in replies for name, reply in item.items()}


def test_a_broker_client_can_read_but_not_stop_or_steer_the_processes(redis_url):
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + "/12"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2")
    orchestrator = start_celery_process("orchestrator", "ctl-orch", env)
    worker = start_celery_process("worker", "ctl-work", env)
    ctl = Celery(broker=url)
    client = Client(Settings(redis_url=url, apps=APP_SPECS))
    try:
        names = [reply for item in ctl.control.ping(timeout=3) for reply in item]
        assert len(names) == 2 and all(name.startswith(("ctl-orch@", "ctl-work@")) for name in names)

        arguments = {"shutdown": {}, "rate_limit": {"task_name": "adk_celery.run_tool", "rate_limit": "1/h"},
                     "add_consumer": {"queue": "adk.tools"}, "cancel_consumer": {"queue": "adk.tools"},
                     "revoke": {"task_id": "x"}, "terminate": {"task_id": "x", "signal": "SIGKILL"},
                     "time_limit": {"task_name": "adk_celery.run_tool", "hard": 0.001},
                     "pool_grow": {"n": 50}, "pool_shrink": {"n": 1}, "autoscale": {"max": 1, "min": 1},
                     "disable_events": {}, "memdump": {}}
        for command in ACTING:
            replies = _replies(ctl, command, names, **arguments[command])
            assert set(replies) == set(names), (command, replies)
            for reply in replies.values():
                assert "refused" in reply.get("error", ""), (command, reply)

        # Both still run, still read (what Flower's worker pages show), and still work.
        assert orchestrator.proc.poll() is None and worker.proc.poll() is None
        stats = ctl.control.inspect(destination=names, timeout=3).stats()
        assert set(stats) == set(names)
        inv = client.enqueue("lookup", "u", "look up Oslo")
        record = client.wait("lookup", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, worker.output())
    finally:
        client.close()
        ctl.close()
        worker.stop()
        orchestrator.stop()
