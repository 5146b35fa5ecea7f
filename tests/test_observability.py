"""What an operator sees over real processes: Prometheus metrics and a tool's progress.

A real redis-server, orchestrator, worker and ``adk-celery api`` (tests/support). The API's
``/metrics`` shows the deployment (invocations by status, finished ones, queue depths,
stuck work, takeovers); each orchestrator and worker serves its own durations and counters
on its metrics port. A tool's ``report_progress`` shows in the invocation's status (route
and ``adk-celery status``) and on its live SSE stream.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.apps import APP_SPECS, PARKED_QUEUE
from tests.apps_extra import APP_SPECS as EXTRA_SPECS
from tests.apps_extra import gate_key
from tests.support import forked
from tests.support.polling import eventually
from tests.support.processes import ManagedProcess, stack_env, start_celery_process
from tests.support.redis_server import free_port
from tests.test_api import start_api

SPECS = f"{APP_SPECS},{EXTRA_SPECS}"
ALL = {"Authorization": "Bearer tok-all"}
TOKENS = json.dumps({"tok-all": ["*"], "tok-chat": ["chat"]})
FAST = {"lease_retry_seconds": "0.2", "job_heartbeat_seconds": "0.3", "job_lost_after_seconds": "1",
        "watchdog_interval_seconds": "0.2"}


def _db(redis_url: str, db: int) -> tuple[str, redis.Redis]:
    url = redis_url.rsplit("/", 1)[0] + f"/{db}"
    check = redis.Redis.from_url(url, decode_responses=True)
    check.flushdb()
    return url, check


def scrape(url: str, headers: dict[str, str] | None = None) -> dict[tuple[str, frozenset], float]:
    """Every sample of a Prometheus endpoint, by (name, labels)."""
    reply = httpx.get(url, headers=headers, timeout=10)
    assert reply.status_code == 200, reply.text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(reply.text) for s in family.samples}


def value(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """One sample's value (0 when absent: a labelled series not observed yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def metrics_url(process: ManagedProcess, port: int) -> str:
    """The metrics URL of an orchestrator or worker, once it answers (started when ready)."""
    url = f"http://127.0.0.1:{port}/metrics"

    def answers() -> bool:
        assert process.proc.poll() is None, process.output()
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    eventually(f"{process.name}'s metrics", answers)
    return url


@pytest.fixture(scope="module")
def stack(redis_url) -> Iterator[dict[str, Any]]:
    """An orchestrator and a worker serving metrics, an API with tokens, a client (db 12)."""
    url, check = _db(redis_url, 12)
    env = stack_env(url, SPECS, **FAST)
    with ExitStack() as stack:
        stack.callback(check.close)
        orch_port, worker_port = free_port(), free_port()
        orchestrator = start_celery_process("orchestrator", "metrics-orch", env,
                                            "--metrics-port", str(orch_port))
        stack.callback(orchestrator.stop)
        worker = start_celery_process("worker", "metrics-work", {
            **env, "ADK_CELERY_METRICS_PORT": str(worker_port)})
        stack.callback(worker.stop)
        api, base = start_api({**env, "ADK_CELERY_API_TOKENS": TOKENS})
        stack.callback(api.stop)
        from workers.client import Client

        client = Client(Settings(redis_url=url, apps=SPECS, lease_retry_seconds=0.2))
        stack.callback(client.close)
        yield {"url": url, "env": env, "check": check, "client": client, "api": base,
               "orchestrator": metrics_url(orchestrator, orch_port),
               "worker": metrics_url(worker, worker_port)}


# ---- metrics --------------------------------------------------------------------------------


def test_a_metrics_port_that_cannot_be_bound_is_logged_and_the_process_runs_on(monkeypatch, caplog):
    from workers import metrics

    monkeypatch.setattr(metrics, "_served", {})
    monkeypatch.setattr(metrics, "app_settings", lambda: Settings.model_construct(metrics_port=70000))
    metrics._serve_when_ready()  # Celery's worker_ready signal
    assert "Metrics not served on port 70000" in caplog.text


def test_cluster_metrics_answer_503_naming_redis_when_it_is_down():
    nobody = f"redis://127.0.0.1:{free_port()}/0"  # no Redis listens there
    api, base = start_api(stack_env(nobody, "", api_metrics_public="true"))
    try:
        reply = httpx.get(f"{base}/metrics", timeout=60)
    finally:
        api.stop()
    assert reply.status_code == 503
    assert reply.json() == {"detail": "Redis is unreachable: the deployment's metrics cannot be read now"}
    assert "Traceback" not in api.output()
    assert any("GET /metrics: Redis is unreachable (ConnectionError: " in line for line in api.lines)


def test_cluster_metrics_need_a_token_that_opens_every_app(stack):
    assert httpx.get(f"{stack['api']}/metrics").status_code == 401
    assert httpx.get(f"{stack['api']}/metrics",
                     headers={"Authorization": "Bearer tok-chat"}).status_code == 403
    reply = httpx.get(f"{stack['api']}/metrics", headers=ALL)
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    samples = scrape(f"{stack['api']}/metrics", ALL)
    assert {"adk_celery_invocations", "adk_celery_queue_messages", "adk_celery_calls_out",
            "adk_celery_lease_takeovers_total"} <= {name for name, _ in samples}
    assert ("adk_celery_queue_messages", frozenset({("queue", PARKED_QUEUE)})) in samples


def test_a_finished_invocation_is_counted_and_its_model_and_tool_calls_timed(stack):
    client, api = stack["client"], f"{stack['api']}/metrics"
    before = (scrape(api, ALL), scrape(stack["orchestrator"]), scrape(stack["worker"]))

    inv = client.enqueue("lookup", "u", "look up Oslo")
    record = client.wait("lookup", inv, timeout=30, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    after = (scrape(api, ALL), scrape(stack["orchestrator"]), scrape(stack["worker"]))

    def grew(which: int, name: str, **labels: str) -> float:
        return value(after[which], name, **labels) - value(before[which], name, **labels)

    # The deployment's view, from Redis: one more completed, nothing left running.
    assert grew(0, "adk_celery_invocations_finished_total", status="completed") == 1
    assert value(after[0], "adk_celery_invocations", status="running") == 0
    # The orchestrator's: its statuses, the latency from enqueue, its two model calls.
    for status in ("running", "paused", "completed"):
        assert grew(1, "adk_celery_invocation_status_changes_total", app="lookup", status=status) == 1
    assert grew(1, "adk_celery_invocation_seconds_count", app="lookup", status="completed") == 1
    assert grew(1, "adk_celery_invocation_seconds_sum", app="lookup", status="completed") > 0
    assert grew(1, "adk_celery_model_call_seconds_count", agent="agent", outcome="ok") == 2
    # The worker's: the remote tool's run.
    assert grew(2, "adk_celery_tool_call_seconds_count", tool="slow_lookup", outcome="ok") == 1
    assert grew(2, "adk_celery_tool_call_seconds_sum", tool="slow_lookup", outcome="ok") > 0


def test_queue_depth_paused_calls_and_a_lost_job_dispatched_again(stack):
    client, check, api = stack["client"], stack["check"], f"{stack['api']}/metrics"
    before = scrape(api, ALL)
    redelivered = value(scrape(stack["orchestrator"]), "adk_celery_redeliveries_total",
                        kind="tool", cause="message_lost")

    inv = client.enqueue("parked", "u", "waiting")  # its queue has no worker: it waits there
    assert client.wait("parked", inv, timeout=10).status is InvocationStatus.PAUSED
    now = scrape(api, ALL)
    assert value(now, "adk_celery_queue_messages", queue=PARKED_QUEUE) == 1
    assert value(now, "adk_celery_invocations", status="paused") == value(
        before, "adk_celery_invocations", status="paused") + 1
    assert value(now, "adk_celery_calls_out") == value(before, "adk_celery_calls_out") + 1
    assert value(now, "adk_celery_calls_stuck") == 0  # the watchdog looks at it

    assert check.lpop(PARKED_QUEUE) is not None  # lost, as by a worker killed as it popped it
    eventually("the watchdog to dispatch it again", lambda: value(
        scrape(stack["orchestrator"]), "adk_celery_redeliveries_total", kind="tool",
        cause="message_lost") == redelivered + 1)
    assert value(scrape(api, ALL), "adk_celery_queue_messages", queue=PARKED_QUEUE) == 1

    client.cancel("parked", inv)
    assert client.wait("parked", inv, timeout=10, until=InvocationStatus.FINISHED).status is InvocationStatus.CANCELLED
    done = scrape(api, ALL)
    assert value(done, "adk_celery_invocations", status="paused") == value(
        before, "adk_celery_invocations", status="paused")
    assert value(done, "adk_celery_invocations_finished_total", status="cancelled") == value(
        before, "adk_celery_invocations_finished_total", status="cancelled") + 1
    check.delete(PARKED_QUEUE)  # the second copy: no worker will ever take it


def test_a_dead_orchestrators_invocation_shows_stuck_then_its_session_taken_over(redis_url):
    """Killed with the invocation's start in hand: queued and stuck, until another takes over."""
    url, check = _db(redis_url, 13)
    env = stack_env(url, SPECS, lease_retry_seconds="0.2", lease_ttl_seconds="2",
                    metrics_stuck_after_seconds="1")
    with ExitStack() as stack:
        stack.callback(check.close)
        doomed = start_celery_process("orchestrator", "doomed", {
            **env, "ADK_CELERY_FAILPOINTS": "orchestrator.before_run=kill"})
        stack.callback(doomed.stop)
        api, base = start_api({**env, "ADK_CELERY_API_METRICS_PUBLIC": "true"})
        stack.callback(api.stop)
        from workers.client import Client

        client = Client(Settings(redis_url=url, apps=SPECS, lease_retry_seconds=0.2))
        stack.callback(client.close)

        inv = client.enqueue("chat", "u", "hello")
        doomed.proc.wait(30)
        assert doomed.proc.returncode == -9, doomed.output()

        def stuck_now() -> dict[tuple[str, frozenset], float] | None:
            samples = scrape(f"{base}/metrics")
            return samples if value(samples, "adk_celery_invocations_stuck", status="queued") else None

        stuck = eventually("the invocation to count as stuck", stuck_now)
        assert value(stuck, "adk_celery_invocations", status="queued") == 1
        assert value(stuck, "adk_celery_wakeups", state="claimed") == 1  # by the dead one
        assert value(stuck, "adk_celery_lease_takeovers_total") == 0

        heir = start_celery_process("orchestrator", "heir", env)
        stack.callback(heir.stop)
        record = client.wait("chat", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, heir.output())
        done = scrape(f"{base}/metrics")
        assert value(done, "adk_celery_lease_takeovers_total") == 1
        assert value(done, "adk_celery_invocations", status="queued") == 0
        assert value(done, "adk_celery_invocations_stuck", status="queued") == 0
        assert value(done, "adk_celery_invocations_finished_total", status="completed") == 1


# ---- progress -------------------------------------------------------------------------------


def _follow(url: str, frames: queue.Queue[dict[str, Any] | None]) -> None:
    """Read an SSE stream frame by frame into ``frames`` (None at its end)."""
    try:
        with httpx.stream("GET", url, headers=ALL, timeout=60) as reply:
            frame: dict[str, Any] = {}
            for line in reply.iter_lines():
                if not line:
                    if frame:
                        frames.put(frame)
                    frame = {}
                    continue
                key, _, text = line.partition(": ")
                frame[key] = json.loads(text) if key == "data" else text
    finally:
        frames.put(None)


def _next_frame(frames: queue.Queue[dict[str, Any] | None], kind: str) -> tuple[dict[str, Any],
                                                                              list[dict[str, Any]]]:
    """The next frame of ``kind`` on the stream, and the frames before it."""
    seen: list[dict[str, Any]] = []
    while True:
        frame = frames.get(timeout=20)
        assert frame is not None, f"the stream ended before a {kind} frame: {seen}"
        if frame.get("event") == kind:
            return frame, seen
        seen.append(frame)


def test_a_tools_progress_shows_in_status_and_on_the_live_stream(stack):
    api, check = stack["api"], stack["check"]
    enqueued = httpx.post(f"{api}/apps/gated/users/u/invocations", headers=ALL,
                          json={"newMessage": "step alpha"})
    assert enqueued.status_code == 202, enqueued.text
    inv = enqueued.json()["invocationId"]
    frames: queue.Queue[dict[str, Any] | None] = queue.Queue()
    reader = threading.Thread(target=_follow, daemon=True, args=(
        f"{api}/apps/gated/invocations/{inv}/stream", frames))
    reader.start()
    released = False
    try:
        progress, earlier = _next_frame(frames, "progress")
        [call] = [p["functionCall"] for f in earlier if f.get("event") == "event"
                  for p in f["data"]["content"]["parts"] if "functionCall" in p]
        assert progress["data"] == {
            "functionCallId": call["id"], "tool": "gated_step", "attempt": 1,
            "at": progress["data"]["at"],
            "progress": {"step": "waiting for release", "label": "alpha"}}

        assert stack["client"].wait("gated", inv, timeout=10).status is InvocationStatus.PAUSED
        status = httpx.get(f"{api}/apps/gated/invocations/{inv}", headers=ALL).json()
        [pending] = status["calls"]
        assert (pending["functionCallId"], pending["where"], pending["progress"]) == (
            call["id"], "running", {"step": "waiting for release", "label": "alpha"})
        assert pending["progressAt"] == progress["data"]["at"]

        shown = forked.run([sys.executable, "-m", "workers.cli", "status", "gated", inv],
                           env=stack["env"], timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["calls"][0]["progress"] == {
            "step": "waiting for release", "label": "alpha"}

        check.lpush(gate_key(inv), "test")
        released = True
        end, after = _next_frame(frames, "status")
        while end["data"]["status"] != "completed":
            end, more = _next_frame(frames, "status")
            after += more
        answered = [p["functionResponse"] for f in after if f.get("event") == "event"
                    for p in f["data"]["content"]["parts"] if "functionResponse" in p]
        assert [a["id"] for a in answered] == [call["id"]]  # the progress came before it
        assert httpx.get(f"{api}/apps/gated/invocations/{inv}", headers=ALL).json()["calls"] == []
    finally:
        if not released:  # never leave the worker blocked on the gate
            check.lpush(gate_key(inv), "cleanup")
        reader.join(30)
