"""Redis on a local socket (``unix://`` URLs, as the settings allow): every process works on it.

A real redis-server listening on a socket only; a real orchestrator and worker; the Client.
Before, every command failed (redis-py's socket connection refuses TCP keepalive options, and
kombu names the scheme ``redis+socket``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.apps import APP_SPECS
from tests.support import forked
from tests.support.processes import stack_env, start_celery_process
from tests.support.redis_server import find_redis_server


@pytest.fixture
def socket_url(tmp_path: Path, redis_url: str):  # redis_url: skips where no redis-server is
    binary = find_redis_server()
    assert binary is not None
    path = tmp_path / "redis.sock"
    server = subprocess.Popen([binary, "--port", "0", "--unixsocket", str(path), "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"unix://{path}"
    try:
        deadline = time.monotonic() + 15
        while True:  # start-up only: poll until it answers
            try:
                redis.Redis.from_url(url).ping()
                break
            except (redis.ConnectionError, FileNotFoundError):
                assert time.monotonic() < deadline, "redis-server did not start on its socket"
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        server.wait(10)


def test_an_invocation_runs_over_a_unix_socket(socket_url):
    from workers.client import Client

    env = stack_env(socket_url, APP_SPECS, lease_retry_seconds="0.2")
    orchestrator = start_celery_process("orchestrator", "socket-orch", env)
    worker = start_celery_process("worker", "socket-work", env)
    client = Client(Settings(redis_url=socket_url, apps=APP_SPECS))
    try:
        inv = client.enqueue("lookup", "u", "look up Oslo")
        record = client.wait("lookup", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, worker.output())
        shown = forked.run([sys.executable, "-m", "workers.cli", "status", "lookup", inv],
                           env=env, timeout=60)
        assert shown.returncode == 0 and '"completed"' in shown.stdout, shown.stderr
    finally:
        client.close()
        worker.stop()
        orchestrator.stop()
