"""Flower follows our tasks: readable names and arguments, the custom PROGRESS state.

Real processes on Redis db 3: an orchestrator, a worker and ``adk-celery flower`` with its
HTTP API opened (``FLOWER_UNAUTHENTICATED_API=true``). The remote tool of the ``gated`` app
reports progress and then blocks until the test releases it, so the test can see the call in
Flower while it runs. Flower is only ever polled with a bounded deadline.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.apps import APP_SPECS as BASE_APP_SPECS
from tests.apps_extra import APP_SPECS as EXTRA_APP_SPECS
from tests.apps_extra import gate_key
from tests.support.processes import ManagedProcess, stack_env, start_celery_process
from tests.support.redis_server import free_port

APPS = f"{BASE_APP_SPECS},{EXTRA_APP_SPECS}"
POLL_INTERVAL = 0.05


def poll(what: str, check: Callable[[], Any], timeout: float, describe: Callable[[], str]) -> Any:
    """Call ``check`` every POLL_INTERVAL until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}; last seen:\n{describe()}")
        time.sleep(POLL_INTERVAL)


def start_flower(env: dict[str, str], port: int) -> ManagedProcess:
    """``adk-celery flower`` on 127.0.0.1:port; returns once ``/healthcheck`` answers OK."""
    flower = ManagedProcess(
        "flower",
        [sys.executable, "-m", "workers.cli", "flower", "--port", str(port), "--address", "127.0.0.1"],
        {**env, "FLOWER_UNAUTHENTICATED_API": "true"},
    )

    def healthy() -> bool:
        if flower.proc.poll() is not None:
            pytest.fail(f"flower exited ({flower.proc.returncode}):\n{flower.output()}")
        try:
            reply = httpx.get(f"http://127.0.0.1:{port}/healthcheck", timeout=1.0)
        except httpx.HTTPError:
            return False
        return reply.status_code == 200 and reply.text.strip() == "OK"

    try:
        poll("flower /healthcheck", healthy, 20.0, flower.output)
    except BaseException:
        flower.stop(timeout=5)
        raise
    return flower


@pytest.fixture(scope="module")
def flower_stack(redis_url):
    """Redis db 3, one orchestrator, one worker, Flower; all stopped at the end."""
    url = redis_url.rsplit("/", 1)[0] + "/3"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APPS, lease_retry_seconds="0.2")
    with ExitStack() as stack:
        # Flower first: it only knows the tasks whose events it has received.
        port = free_port()
        flower = start_flower(env, port)
        stack.callback(flower.stop, 5.0)
        orchestrator = start_celery_process("orchestrator", "flower-orch", env)
        stack.callback(orchestrator.stop)
        worker = start_celery_process("worker", "flower-work", env)
        stack.callback(worker.stop)
        from workers.client import Client

        client = Client(Settings(redis_url=url, apps=APPS, lease_retry_seconds=0.2),
                        enqueue_via_celery=True)  # so the invoke task shows in Flower too
        stack.callback(client.close)
        gate = redis.Redis.from_url(url, decode_responses=True)
        stack.callback(gate.close)
        yield {"client": client, "flower": flower, "api": f"http://127.0.0.1:{port}/api", "url": url,
               "gate": gate, "orchestrator": orchestrator, "worker": worker}


def flower_tasks(api: str) -> dict[str, dict[str, Any]]:
    reply = httpx.get(f"{api}/tasks", timeout=2.0)
    assert reply.status_code == 200, (reply.status_code, reply.text[:500])
    return reply.json()


def find_task(api: str, name_prefix: str, invocation_id: str, state: str | None = None) -> dict | None:
    for task in flower_tasks(api).values():
        if (str(task.get("name") or "").startswith(name_prefix)
                and invocation_id in str(task.get("kwargs") or "")
                and (state is None or task.get("state") == state)):
            return task
    return None


def _wait_until_flower_listens(stack: dict[str, Any]) -> None:
    """Flower answers HTTP before its event receiver is subscribed: probe until it sees a task."""
    client, api = stack["client"], stack["api"]
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline:
        probe = client.enqueue("chat", "probe", "hello")
        record = client.wait("chat", probe, timeout=10, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        end = min(deadline, time.monotonic() + 1.0)
        while time.monotonic() < end:
            if find_task(api, "adk_celery.invoke", probe, "SUCCESS"):
                return
            time.sleep(POLL_INTERVAL)
    pytest.fail(f"Flower never showed a probe invocation:\n{stack['flower'].output()}")


def test_flower_shows_the_remote_tool_with_progress_then_success(flower_stack):
    client, api, gate = flower_stack["client"], flower_stack["api"], flower_stack["gate"]
    _wait_until_flower_listens(flower_stack)

    inv = client.enqueue("gated", "u", "step alpha")
    released = False
    try:
        record = client.wait("gated", inv, timeout=10)
        assert record.status is InvocationStatus.PAUSED, (record.status, record.error)
        [call_id] = record.pending_calls

        def tasks_text() -> str:
            return "\n".join(f"{k}: {v.get('name')} {v.get('state')} {str(v.get('kwargs'))[:300]}"
                             for k, v in flower_tasks(api).items())

        tool_task = poll(
            "the tool task in state PROGRESS",
            lambda: find_task(api, "adk_celery.run_tool", inv, "PROGRESS"), 10.0, tasks_text,
        )
        # Readable: the shadow name says which tool, the id and kwargs say which invocation.
        assert tool_task["name"] == "adk_celery.run_tool:gated_step"
        assert tool_task["uuid"] == f"{inv}:{call_id}"
        kwargs = str(tool_task["kwargs"])
        assert inv in kwargs and "gated_step" in kwargs and call_id in kwargs
        assert tool_task["worker"].startswith("flower-work@")
        # Still running: the invocation is paused on that call.
        assert client.status("gated", inv).status is InvocationStatus.PAUSED

        gate.lpush(gate_key(inv), "test")
        released = True
        done = poll(
            "the tool task to succeed",
            lambda: find_task(api, "adk_celery.run_tool", inv, "SUCCESS"), 15.0, tasks_text,
        )
        assert done["uuid"] == tool_task["uuid"]
        record = client.wait("gated", inv, timeout=15, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        events = client.events("gated", inv)
        assert events[-1].content.parts[0].text == "gated alpha released=True by test"

        # The orchestrator's side is visible too: the invoke task that started this invocation.
        invoke = poll(
            "the invoke task", lambda: find_task(api, "adk_celery.invoke", inv, "SUCCESS"),
            10.0, tasks_text,
        )
        assert "gated" in str(invoke["kwargs"]) and invoke["worker"].startswith("flower-orch@")
    finally:
        if not released:  # never leave the worker blocked on the gate
            gate.lpush(gate_key(inv), "cleanup")


def test_a_progress_report_shaped_like_kombus_type_envelope_leaves_flower_working(flower_stack):
    """A tool's report travels to Flower in Celery's stock json, whose decoder would turn an
    object shaped like kombu's type envelope into an object, or refuse the whole message for
    an unknown type: Flower dropped the task's PROGRESS event and its result could not be
    read. Such a report shows there as a note; the call's status carries it whole."""
    client, api, gate = flower_stack["client"], flower_stack["api"], flower_stack["gate"]
    _wait_until_flower_listens(flower_stack)
    note = {"__type__": "not-a-kombu-type", "__value__": 1}
    inv = client.enqueue("noted", "u", json.dumps(note))
    released = False
    try:
        record = client.wait("noted", inv, timeout=10)
        assert record.status is InvocationStatus.PAUSED, (record.status, record.error)
        progress = poll("the call's progress",
                        lambda: next((c.progress for c in client.calls("noted", inv)), None),
                        10.0, lambda: str(client.calls("noted", inv)))
        assert progress == {"note": note}  # whole where our own JSON carries it
        tool_task = poll(
            "the tool task in state PROGRESS",
            lambda: find_task(api, "adk_celery.run_tool", inv, "PROGRESS"), 10.0,
            lambda: str(flower_tasks(api))[:2000],
        )
        # Celery's result backend (what AsyncResult, and Flower's /api/task/result, read).
        from celery.result import AsyncResult

        from workers.celery_app import create_celery_app

        result = AsyncResult(tool_task["uuid"], app=create_celery_app(
            Settings(redis_url=flower_stack["url"])))
        assert result.state == "PROGRESS"
        assert result.info["progress"] == {"not_shown": "progress.note is an object shaped like kombu's type "
                                      "envelope, which Celery's json would decode; the "
                                      "invocation's status and live stream show the report"}
        gate.lpush(gate_key(inv), "test")
        released = True
        record = client.wait("noted", inv, timeout=15, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
    finally:
        if not released:  # never leave the worker blocked on the gate
            gate.lpush(gate_key(inv), "cleanup")


def test_flower_shows_a_tool_job_still_waiting_in_its_queue(flower_stack):
    """The orchestrator's task-sent event: a job no worker has picked up yet is visible.

    The ``parked`` app's tool goes to a queue this stack's worker does not consume, so the
    job stays queued; Flower knows of it only from the event sent with the job.
    """
    client, api = flower_stack["client"], flower_stack["api"]
    _wait_until_flower_listens(flower_stack)
    inv = client.enqueue("parked", "u", "waiting")
    try:
        record = client.wait("parked", inv, timeout=10)
        assert record.status is InvocationStatus.PAUSED, (record.status, record.error)
        [call_id] = record.pending_calls
        task = poll(
            "the queued tool task", lambda: find_task(api, "adk_celery.run_tool", inv), 10.0,
            lambda: str(flower_tasks(api))[:2000],
        )
        # Celery's task-sent event names the task itself; the tool shows in its arguments.
        assert task["name"] == "adk_celery.run_tool"
        assert task["uuid"] == f"{inv}:{call_id}"
        assert task["state"] == "PENDING" and not task.get("worker")  # sent, never received
        assert task["routing_key"] == "parked"
        assert "parked_tool" in str(task["kwargs"]) and call_id in str(task["kwargs"])
    finally:
        client.cancel("parked", inv)
