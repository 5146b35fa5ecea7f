"""``adk-celery flower``'s login, worker pages and Celery's result backend, over real processes.

- The login (``ADK_CELERY_FLOWER_BASIC_AUTH``) is one ``user:password``: a value Flower would
  split into several logins, or take whole as a bare password, is refused at start (one
  line, naming the variable, never the value).
- A worker's page and ``/api/workers`` show its running and reserved tasks (Celery's
  ``inspect active/reserved``): their arguments are redacted as the task list's are
  (``ADK_CELERY_FLOWER_TASK_ARGUMENTS``).
- A tool that reported progress leaves no ``PROGRESS`` state (and no payload) in Celery's
  result backend once it has finished; while it runs, Flower shows it.
- Stock ``celery -A ... flower`` stops when the app module asks (workers.flower's guard).

Redis db 2; a worker running one job at a time that reserves one more, and two Flowers (task
arguments ``redacted``, the default, and ``full``).
"""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.apps import APP_SPECS
from tests.apps_extra import APP_SPECS as EXTRA_SPECS
from tests.apps_extra import gate_key
from tests.support.polling import eventually
from tests.support.processes import ROOT, ManagedProcess, stack_env, start_celery_process
from tests.support.redis_server import free_port
from tests.test_security_flower import start_flower, wait_until_up

SPECS = f"{APP_SPECS},{EXTRA_SPECS}"
LOGIN = ("admin", "s3cret-pass")


def basic(credentials: str) -> dict[str, str]:
    """An Authorization header sending ``credentials`` as they are (no ``user:`` added)."""
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


# ---- the login -------------------------------------------------------------------------------


def _refused_at_start(env: dict[str, str]) -> str:
    """Start ``adk-celery flower``; it must exit non-zero without serving: its output."""
    port = free_port()
    flower = start_flower(env, port)
    try:
        code = flower.proc.wait(30)
    finally:
        flower.stop(5)
    output = flower.output()
    assert code != 0, output
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
    return output


@pytest.mark.parametrize(("value", "rule"), [
    ("adm1n:pa55,w0rd", "without a comma"),
    ("s3cr3tpassw0rd", "no colon"),
    (":s3cr3tpassw0rd", "user name"),
    ("adm1n:", "password"),
])
def test_a_malformed_login_is_refused_at_start_without_showing_it(redis_url, value, rule):
    env = stack_env(redis_url, SPECS, flower_basic_auth=value)
    output = _refused_at_start(env)
    [line] = output.strip().splitlines()
    assert line.startswith("adk-celery: error: ADK_CELERY_FLOWER_BASIC_AUTH: ") and rule in line
    for part in {value, *value.replace(":", ",").split(",")} - {""}:
        assert part not in line.removeprefix("adk-celery: error: ADK_CELERY_FLOWER_BASIC_AUTH: "), (
            part, line)


def test_an_empty_login_is_no_login(redis_url):
    # As docker-compose.yml passes it without FLOWER_BASIC_AUTH: Flower took it for a login
    # (one that `Authorization: Basic =` matched) and served on any address.
    env = stack_env(redis_url, SPECS, flower_basic_auth="")
    port = free_port()
    flower = ManagedProcess("flower", [sys.executable, "-m", "workers.cli", "flower", "--port",
                                       str(port), "--address", "0.0.0.0"], env)
    try:
        assert flower.proc.wait(30) != 0
    finally:
        flower.stop(5)
    assert "no login configured" in flower.output()


def test_a_login_given_to_flower_itself_is_checked_too(redis_url):
    env = {**stack_env(redis_url, SPECS), "FLOWER_BASIC_AUTH": "adm1n:pa55,s3cr3tpassw0rd"}
    output = _refused_at_start(env)
    assert "FLOWER_BASIC_AUTH: login 2 of 2 is not user:password" in output
    assert "s3cr3tpassw0rd" not in output and "pa55" not in output


def test_the_login_is_one_user_and_password_colons_included(redis_url):
    password = "pa:ss-word"  # a colon after the first one is the password's
    env = stack_env(redis_url, SPECS, flower_basic_auth=f"admin:{password}")
    port = free_port()
    flower = start_flower(env, port)
    try:
        base = f"http://127.0.0.1:{port}"
        eventually("flower", lambda: _answers(flower, base, ("admin", password)), timeout=20)
        assert httpx.get(f"{base}/api/workers", auth=("admin", password), timeout=5).status_code == 200
        for sent in (password, "admin", "ss-word", "admin:pa", f"admin:{password}x"):
            assert httpx.get(f"{base}/api/workers", headers=basic(sent), timeout=5).status_code == 401
    finally:
        flower.stop(5)


def _answers(flower: ManagedProcess, base: str, auth: tuple[str, str]) -> bool:
    assert flower.proc.poll() is None, flower.output()
    try:
        return httpx.get(f"{base}/healthcheck", auth=auth, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


# ---- a worker's page and the result backend --------------------------------------------------


@pytest.fixture(scope="module")
def stack(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/2"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, SPECS, lease_retry_seconds="0.2", flower_basic_auth=":".join(LOGIN))
    with ExitStack() as stack:
        flowers = {}
        for mode in ("redacted", "full"):
            port = free_port()
            flower = start_flower({**env, "ADK_CELERY_FLOWER_TASK_ARGUMENTS": mode}, port)
            stack.callback(flower.stop, 5.0)
            flowers[mode] = f"http://127.0.0.1:{port}"
            wait_until_up(flower, flowers[mode])
        orchestrator = start_celery_process("orchestrator", "leak-orch", env)
        stack.callback(orchestrator.stop)
        # One job at a time, one more taken from the queue meanwhile (inspect reserved).
        worker = start_celery_process("worker", "leak-work", env, "--prefetch-multiplier=2",
                                      concurrency=1)
        stack.callback(worker.stop)
        from workers.client import Client

        client = Client(Settings(redis_url=url, apps=SPECS))
        stack.callback(client.close)
        store = redis.Redis.from_url(url, decode_responses=True)
        stack.callback(store.close)
        yield {"flowers": flowers, "client": client, "store": store,
               "worker": "leak-work@" + __import__("socket").gethostname()}


def _gated_call(client: Any, label: str) -> tuple[str, str]:
    """Start a gated invocation whose tool's argument is ``label``: (invocation, task id)."""
    inv = client.enqueue("gated", "u", f"step {label}")
    record = client.wait("gated", inv, timeout=10)
    assert record.status is InvocationStatus.PAUSED, (record.status, record.error)
    [call_id] = record.pending_calls
    return inv, f"{inv}:{call_id}"


def _workers(base: str, query: str) -> str:
    reply = httpx.get(f"{base}/api/workers?{query}", auth=LOGIN, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.text


def test_a_workers_running_and_reserved_tasks_show_without_their_arguments(stack):
    client, store, worker = stack["client"], stack["store"], stack["worker"]
    labels = ("running-label-kept-private", "reserved-label-kept-private")
    started: list[str] = []
    try:
        for label in labels:
            started.append(_gated_call(client, label)[0])
        full = stack["flowers"]["full"]

        def both_on_the_worker() -> str | None:
            text = _workers(full, f"refresh=1&workername={worker}")
            return text if all(label in text for label in labels) else None

        # Full: Flower shows the arguments as the worker reports them.
        shown = eventually("the two tool jobs on the worker, as Flower shows them", both_on_the_worker,
                           timeout=15)
        assert '"active": [{' in shown and '"reserved": [{' in shown
        assert all(label in _workers(full, "refresh=1") for label in labels)

        redacted = stack["flowers"]["redacted"]
        texts = [_workers(redacted, f"refresh=1&workername={worker}"),
                 _workers(redacted, "refresh=1"), _workers(redacted, ""),
                 httpx.get(f"{redacted}/worker/{worker}", auth=LOGIN, timeout=10).text]
        assert '"active": [{' in texts[0] and '"reserved": [{' in texts[0]
        for text in texts:
            assert not any(label in text for label in labels), text
        # Which invocations they are stays readable.
        assert all(inv in texts[0] for inv in started)
        assert "characters redacted>" in texts[0]
    finally:
        for inv in started:
            store.lpush(gate_key(inv), "test")
    for inv in started:
        record = client.wait("gated", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error


def test_a_finished_tools_progress_leaves_nothing_in_the_result_backend(stack):
    client, store = stack["client"], stack["store"]
    base = stack["flowers"]["redacted"]
    label = "progress-label-kept-private"
    inv, task_id = _gated_call(client, label)
    meta_key = f"celery-task-meta-{task_id}"
    try:
        # While it runs: PROGRESS, with its payload, in the backend and in Flower.
        meta = eventually("the PROGRESS state", lambda: store.get(meta_key), timeout=15)
        assert '"PROGRESS"' in meta and label in meta
        result = httpx.get(f"{base}/api/task/result/{task_id}", auth=LOGIN, timeout=5).json()
        assert result["state"] == "PROGRESS"
        page = eventually("the task page in state PROGRESS",
                          lambda: _task_page(base, task_id, "PROGRESS"), timeout=15)
        assert "adk_celery.run_tool:gated_step" in page
    finally:
        store.lpush(gate_key(inv), "test")
    record = client.wait("gated", inv, timeout=15, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    eventually("the PROGRESS state removed", lambda: store.get(meta_key) is None, timeout=15)
    assert not any(label in (store.get(key) or "") for key in store.scan_iter("celery-task-meta-*"))
    result = httpx.get(f"{base}/api/task/result/{task_id}", auth=LOGIN, timeout=5).json()
    assert result["state"] != "PROGRESS" and label not in str(result)
    # Flower's task page follows the task's events: it says it succeeded.
    eventually("the task page in state SUCCESS", lambda: _task_page(base, task_id, "SUCCESS"),
               timeout=15)

    # A tool that reports and returns at once (no gate) leaves nothing either.
    inv = client.enqueue("lookup", "u", "look up Oslo")
    record = client.wait("lookup", inv, timeout=15, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert not list(store.scan_iter(f"celery-task-meta-{inv}:*"))


def _task_page(base: str, task_id: str, state: str) -> str | None:
    reply = httpx.get(f"{base}/task/{task_id}", auth=LOGIN, timeout=5)
    return reply.text if reply.status_code == 200 and f">{state}</span>" in reply.text else None


def test_a_report_after_its_task_ended_writes_no_state():
    from workers.progress import BackendProgress

    class Backend:
        forgotten: list[str] = []

        def forget(self, task_id: str) -> None:
            self.forgotten.append(task_id)

    class Task:
        backend = Backend()
        states: list[str] = []

        def update_state(self, task_id: str, state: str, meta: dict[str, Any]) -> None:
            self.states.append(state)

    task = Task()
    silent = BackendProgress(task, "t0")  # type: ignore[arg-type]
    silent.end()
    assert Backend.forgotten == []  # nothing written, nothing to forget
    progress = BackendProgress(task, "t1")  # type: ignore[arg-type]
    assert progress.write({"step": 1})
    progress.end()
    assert not progress.write({"step": 2})  # from a thread the tool left running
    assert (Task.states, Backend.forgotten) == (["PROGRESS"], ["t1"])

    # A write in flight when the task ends is forgotten after it, never left behind.
    in_flight, release = threading.Event(), threading.Event()

    class SlowTask(Task):
        def update_state(self, task_id: str, state: str, meta: dict[str, Any]) -> None:
            in_flight.set()
            release.wait(5)
            Backend.forgotten.append(f"written {task_id}")

    slow = BackendProgress(SlowTask(), "t2")  # type: ignore[arg-type]
    writer = threading.Thread(target=slow.write, args=({"step": 1},))
    writer.start()
    in_flight.wait(5)
    ender = threading.Thread(target=slow.end)
    ender.start()
    time.sleep(0.05)
    release.set()
    writer.join(5)
    ender.join(5)
    assert Backend.forgotten[-2:] == ["written t2", "t2"]


# ---- stock Flower -------------------------------------------------------------------------------


def test_stock_flower_on_a_guarded_app_stops_before_serving(redis_url):
    """``celery -A <module> flower`` on a module that calls workers.flower's guard as it loads.

    tests/flower_guard.py is workers/celery_app.py's app with the guard's lines; ``celery -A
    workers flower`` stops the same way once celery_app.py has them.
    """
    env = stack_env(redis_url, SPECS)
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "workers", "flower",
         "--address=0.0.0.0", f"--port={port}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "refused" in done.stderr and "adk-celery flower" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.flower_guard", "flower",
         "--address=0.0.0.0", f"--port={port}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "refused" in done.stderr and "adk-celery flower" in done.stderr
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
    # Celery's other commands on that module are left alone.
    done = subprocess.run([sys.executable, "-m", "celery", "-A", "tests.flower_guard", "report"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_flower_on_a_port_in_use_says_so_in_one_line(redis_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "workers.cli", "flower", f"--port={port}"],
            cwd=ROOT, env=stack_env(redis_url, SPECS), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"adk-celery flower: error: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
