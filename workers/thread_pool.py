"""The tool workers' thread pool: Celery's, except that a handed-over job starts at once.

With Celery's own threads pool, the consumer thread goes on after handing a job to a pool
thread (it publishes the task-received event, polls the broker) while the woken pool thread
waits for the GIL; the job starts only when the consumer next blocks. Yielding the GIL right
after the hand-over lets the job run first, as the solo pool would, and the bookkeeping
follows. ``adk-celery worker`` selects it for ``--pool threads`` (its default).
"""

from __future__ import annotations

import time
from typing import Any

from celery.concurrency import thread


class TaskPool(thread.TaskPool):
    """Celery's threads pool, yielding the GIL to the pool thread that just got a job."""

    def on_apply(self, *args: Any, **kwargs: Any) -> Any:
        """Hand the job to a pool thread, then let that thread take the GIL."""
        result = super().on_apply(*args, **kwargs)
        time.sleep(0)  # releases the GIL; the woken pool thread is waiting for it
        return result
