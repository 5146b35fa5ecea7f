"""A bare Celery app with a no-op task: the raw round-trip baseline for bench/e2e_latency.py."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("noop", broker=os.environ["NOOP_REDIS_URL"], backend=os.environ["NOOP_REDIS_URL"])
app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"],
                task_default_queue="noop", worker_prefetch_multiplier=1)


@app.task(name="noop")
def noop(i: int) -> int:
    """Return the argument."""
    return i
