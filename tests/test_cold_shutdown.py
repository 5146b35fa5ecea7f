"""A second Ctrl-C on a worker in the middle of a tool: a cold shutdown, without a traceback."""

from __future__ import annotations

import signal
import time

import redis

from config import Settings
from tests.apps import APP_SPECS as BASE_APP_SPECS
from tests.apps_extra import APP_SPECS as EXTRA_APP_SPECS
from tests.support.processes import stack_env, start_celery_process

APPS = f"{BASE_APP_SPECS},{EXTRA_APP_SPECS}"


def test_two_ctrl_c_on_a_worker_running_a_tool_exit_cleanly(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/11"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APPS, lease_retry_seconds="0.2")
    orchestrator = start_celery_process("orchestrator", "cold-orch", env)
    worker = start_celery_process("worker", "cold-work", env)
    from workers.client import Client

    client = Client(Settings(redis_url=url, apps=APPS))
    try:
        invocation_id = client.enqueue("gated", "u", "step one")
        deadline = time.monotonic() + 15
        while not any(c.where == "running" for c in client.calls("gated", invocation_id)):
            assert time.monotonic() < deadline, worker.output()
            time.sleep(0.05)

        worker.proc.send_signal(signal.SIGINT)  # warm shutdown: waits for the tool
        worker.wait_for_line(lambda line: "warm shutdown" in line.lower())
        worker.proc.send_signal(signal.SIGINT)  # cold: kill the running job
        # Promptly, not once the tool returns (it holds for 15 s): Python joins the tool
        # threads at exit, and the process used to wait for them.
        assert worker.proc.wait(10) is not None
        output = worker.output()
        assert "NotImplementedError" not in output and "does not implement kill_job" not in output
        assert "Traceback" not in output
        assert "cannot be killed" in output
    finally:
        client.close()
        worker.kill()
        orchestrator.stop()
