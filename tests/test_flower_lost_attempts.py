"""Flower shows a job attempt whose worker was killed as failed, not as running for ever.

Flower's task list is made of task events; a worker killed mid-tool never sends the event
that ends its task, so Flower kept the attempt in the state its last event gave
(``PROGRESS``) while the call had long been sent again and answered. The orchestrators'
watchdog sends that ``task-failed`` event (workers/lost_attempts.py). Real processes: an
orchestrator, a worker killed with SIGKILL mid-tool, its heir and ``adk-celery flower``.
"""

from __future__ import annotations

from typing import Any

import pytest

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.apps_extra import gate_key, runs_key
from tests.support.processes import start_celery_process
from tests.support.redis_server import free_port
from tests.test_flower import _wait_until_flower_listens, flower_tasks, poll, start_flower
from tests.test_lost_jobs import SPECS, _dead_attempt_running, _stack


@pytest.mark.parametrize("failpoint", [
    None,
    # The orchestrator dies after the result backend's PROGRESS became FAILURE and before
    # the event: its heir finds the settling done, and must still tell Flower.
    "watchdog.lost_state_settled=kill",
])
def test_flower_shows_the_attempt_of_a_killed_worker_as_failed_and_why(redis_url, failpoint):
    settings = {"failpoints": failpoint} if failpoint else {}
    with _stack(redis_url, 6, worker=False, **settings) as s:
        port = free_port()
        flower = start_flower(s.env, port)
        s.stack.callback(flower.stop, 5.0)
        api = f"http://127.0.0.1:{port}/api"
        from workers.client import Client

        probing = Client(Settings(redis_url=s.url, apps=SPECS, lease_retry_seconds=0.2),
                         enqueue_via_celery=True)  # the probe's invoke task shows in Flower
        s.stack.callback(probing.close)
        _wait_until_flower_listens({"client": probing, "api": api, "flower": flower})

        def task(task_id: str) -> dict[str, Any]:
            return flower_tasks(api).get(task_id) or {}

        def shown() -> str:
            return "\n".join(f"{k}: {v.get('state')} {v.get('exception')}"
                             for k, v in flower_tasks(api).items())

        inv, dead = _dead_attempt_running(s)
        poll("the attempt in PROGRESS", lambda: task(dead).get("state") == "PROGRESS", 10.0, shown)
        s.start_worker("heir-worker")
        seen_by = "orch-6@"
        if failpoint:
            s.orchestrator.proc.wait(30)
            assert s.orchestrator.proc.returncode == -9, s.orchestrator.output()
            assert _backend_state(s.check, dead) == "FAILURE"  # settled; no event sent yet
            assert task(dead).get("state") == "PROGRESS"
            heir = start_celery_process("orchestrator", "heir-orch", {
                k: v for k, v in s.env.items() if k != "ADK_CELERY_FAILPOINTS"})
            s.stack.callback(heir.stop)
            seen_by = "heir-orch@"
        assert s.check.blpop([runs_key(inv)], timeout=20) is not None, s.orchestrator.output()

        failed = poll("the dead attempt FAILURE", lambda: task(dead).get("state") == "FAILURE" and
                      task(dead), 10.0, shown)
        assert failed["exception"].startswith("WorkerLostError('Worker lost: its worker ")
        assert f"sent again as attempt 2 (task {dead}:2)" in failed["exception"]
        assert failed["worker"].startswith(seen_by), failed["worker"]  # who saw it end

        s.check.lpush(gate_key(inv), "test")
        record = s.client.wait("fragile", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        poll("attempt 2 SUCCESS", lambda: task(f"{dead}:2").get("state") == "SUCCESS", 10.0, shown)
        assert task(dead)["state"] == "FAILURE"


def _backend_state(check: Any, task_id: str) -> str:
    """The task's state in Celery's result backend, read from its stored meta."""
    import json

    return str(json.loads(check.get(f"celery-task-meta-{task_id}"))["status"])


def test_an_event_for_flower_that_cannot_be_sent_is_logged_and_never_raised(caplog):
    """The event is for the operator's eyes: a broker out of reach must not stop the watchdog
    from sending the call again or answering it (it would, were the error raised)."""
    from tests.support.redis_server import free_port
    from workers.celery_app import create_celery_app
    from workers.lost_attempts import LostAttemptEvents

    app = create_celery_app(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    events = LostAttemptEvents(app, "orch@test")
    try:
        with caplog.at_level("WARNING", logger="workers.task_events"):
            events.send("e-1:c1", "Worker lost: test.")  # returns: nothing raised
    finally:
        events.close()
    [record] = [r for r in caplog.records if r.name == "workers.task_events"]
    assert "The task-failed event of task e-1:c1 was not sent" in record.getMessage()
