"""``adk-celery flower`` as shipped: behind its login, without task-running or worker control,
and without the text of the messages it shows.

Real processes on Redis db 10: an orchestrator, a worker and Flower with a basic-auth login.
"""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.apps import APP_SPECS
from tests.support.processes import ManagedProcess, stack_env, start_celery_process
from tests.support.redis_server import free_port
from workers.flower import redact_arguments

LOGIN = ("admin", "s3cret-pass")
SECRET_TEXT = "my diagnosis is confidential"


def start_flower(env: dict[str, str], port: int, address: str = "127.0.0.1") -> ManagedProcess:
    return ManagedProcess("flower", [sys.executable, "-m", "workers.cli", "flower", "--port",
                                     str(port), "--address", address], env)


def wait_until_up(flower: ManagedProcess, base: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if flower.proc.poll() is not None:
            pytest.fail(f"flower exited:\n{flower.output()}")
        try:
            if httpx.get(f"{base}/healthcheck", auth=LOGIN, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    pytest.fail(f"flower did not come up:\n{flower.output()}")


@pytest.fixture(scope="module")
def locked(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/10"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2",
                    flower_basic_auth=":".join(LOGIN))
    with ExitStack() as stack:
        port = free_port()
        flower = start_flower(env, port)
        stack.callback(flower.stop, 5.0)
        base = f"http://127.0.0.1:{port}"
        wait_until_up(flower, base)
        orchestrator = start_celery_process("orchestrator", "lock-orch", env)
        stack.callback(orchestrator.stop)
        worker = start_celery_process("worker", "lock-work", env)
        stack.callback(worker.stop)
        from workers.client import Client

        client = Client(Settings(redis_url=url, apps=APP_SPECS), enqueue_via_celery=True)
        stack.callback(client.close)
        yield {"base": base, "client": client, "url": url, "worker": worker, "env": env}


@pytest.mark.parametrize("path", ["/metrics", "/healthcheck", "/", "/tasks", "/api/tasks",
                                  "/api/workers"])
def test_every_route_needs_the_login(locked, path):
    assert httpx.get(locked["base"] + path, timeout=5).status_code == 401
    assert httpx.get(locked["base"] + path, auth=("admin", "wrong"), timeout=5).status_code == 401
    assert httpx.get(locked["base"] + path, auth=LOGIN, timeout=5).status_code == 200


def test_a_logged_in_user_can_neither_run_tasks_nor_stop_workers(locked):
    base, worker = locked["base"], locked["worker"]
    forged = {"kwargs": {"app_name": "lookup", "user_id": "victim", "session_id": "s",
                         "invocation_id": "e-x", "function_call_id": "c", "tool_name": "slow_lookup",
                         "agent_name": "agent", "args": {"city": "Oslo"}}}
    for path in ("/api/task/async-apply/adk_celery.run_tool", "/api/task/send-task/adk_celery.run_tool",
                 "/api/task/apply/adk_celery.invoke"):
        reply = httpx.post(base + path, json=forged, auth=LOGIN, timeout=5)
        assert reply.status_code == 403, (path, reply.status_code, reply.text)
        assert "ADK_CELERY_FLOWER_ALLOW_CONTROL" in reply.text
    name = "lock-work@" + __import__("socket").gethostname()
    reply = httpx.post(f"{base}/api/worker/shutdown/{name}", auth=LOGIN, timeout=5)
    assert reply.status_code == 403
    # The worker is still there and still runs the real work.
    client = locked["client"]
    inv = client.enqueue("lookup", "u", "look up Oslo")
    assert client.wait("lookup", inv, timeout=15, until=InvocationStatus.FINISHED).status is InvocationStatus.COMPLETED
    assert worker.proc.poll() is None


def test_message_text_is_neither_shown_nor_kept_in_task_results(locked):
    base, client = locked["base"], locked["client"]
    inv = client.enqueue("chat", "patient-7", SECRET_TEXT)
    assert client.wait("chat", inv, timeout=15, until=InvocationStatus.FINISHED).status is InvocationStatus.COMPLETED

    deadline = time.monotonic() + 15
    shown: dict[str, Any] | None = None
    while shown is None and time.monotonic() < deadline:
        tasks = httpx.get(f"{base}/api/tasks", auth=LOGIN, timeout=5).json()
        shown = next((t for t in tasks.values() if t.get("name") == "adk_celery.invoke"
                      and inv in str(t.get("kwargs"))), None)
        time.sleep(0.05)
    assert shown is not None, "Flower never showed the invoke task"
    assert "patient-7" in shown["kwargs"]  # who and which invocation stay readable
    # The Client's task shows its identifiers only (tests/test_client_checks.py); Flower's own
    # redaction of what other senders show is test_redaction_modes'.
    assert SECRET_TEXT not in str(shown) and "new_message" not in shown["kwargs"]

    store = redis.Redis.from_url(locked["url"])
    metas = [store.get(key) for key in store.scan_iter("celery-task-meta-*")]
    assert metas and not any(SECRET_TEXT.encode() in meta for meta in metas)
    ttls = [store.ttl(key) for key in store.scan_iter("celery-task-meta-*")]
    assert max(ttls) <= 3600


def test_without_a_login_flower_refuses_to_listen_beyond_loopback(locked):
    env = {k: v for k, v in locked["env"].items() if k != "ADK_CELERY_FLOWER_BASIC_AUTH"}
    flower = start_flower(env, free_port(), address="0.0.0.0")
    try:
        assert flower.proc.wait(30) == 2  # a missing setting, as the API's refusal
    finally:
        flower.stop(5)
    assert "adk-celery: error: no login configured" in flower.output()
    assert "refusing to serve on '0.0.0.0'" in flower.output()


def test_redaction_modes():
    text = repr({"app_name": "chat", "user_id": "u1", "new_message": "a" * 50,
                 "state_delta": {"k": 1}})
    assert redact_arguments(text, "redacted") == repr({
        "app_name": "chat", "user_id": "u1", "new_message": "<str, 50 characters redacted>",
        "state_delta": {"k": "<int redacted>"}})
    assert "a" * 40 + "..." in redact_arguments(text, "truncated")
    assert redact_arguments(text, "full") == text
    assert redact_arguments("{'x': __import__('os')}", "redacted") == "<23 characters redacted>"
