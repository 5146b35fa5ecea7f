"""A bare Celery app with one no-op task: the raw round trip our figures are compared with.

The worker is started with ``celery -A bench._raw_noop_celery -b URL --result-backend URL worker
-Q bench.noop``; the benchmark builds the same app with :func:`make_app`. Configuration is the
one of baseline.md (shared folder beside the checkout) §3b: JSON serializer, Celery defaults
otherwise (no task events, early acks).
"""

from __future__ import annotations

from celery import Celery

QUEUE = "bench.noop"
TASK = "bench.noop"


def make_app(url: str | None = None) -> Celery:
    """The no-op app on ``url`` (broker and result backend); None = set by the CLI (-b)."""
    celery_app = Celery("bench_noop", broker=url, backend=url)
    celery_app.conf.update(
        task_serializer="json", result_serializer="json", accept_content=["json"],
        result_accept_content=["json"], task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
    )

    @celery_app.task(name=TASK, shared=False)
    def noop(i: int) -> int:
        return i

    return celery_app


app = make_app()
