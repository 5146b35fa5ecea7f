"""The tool workers' thread pool: Celery's, except that a handed-over job gets a head start.

With Celery's own threads pool, the consumer thread goes on after handing a job to a pool
thread (it publishes task events, acknowledges, polls the broker) while the pool thread
runs the job. In one process both need the GIL: each time the job's Redis reply arrives it
waits for the consumer's next blocking call. Most tool jobs are short (a check, the tool, the
result script: about a millisecond), so the consumer here first waits for the job it handed
over, for up to ``ADK_CELERY_WORKER_HEAD_START_MS``, with the GIL released: a short job
runs as on the solo pool, and a long one runs alongside the next ones, as on Celery's pool,
which then start at most that much later. ``adk-celery worker`` selects this pool for
``--pool threads`` (its default).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from celery.concurrency import thread
from celery.worker import state as worker_state

logger = logging.getLogger(__name__)


class TaskPool(thread.TaskPool):
    """Celery's threads pool; the consumer gives each job a head start before going on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_start = max(self.app.adk_settings.worker_head_start_ms, 0.0) / 1000

    def terminate_job(self, pid: Any, signal: Any = None) -> None:
        """A thread cannot be killed: on a cold shutdown its job dies with the process.

        Celery asks the pool to kill running jobs when a second Ctrl-C (or SIGQUIT) turns
        a warm shutdown cold; its base pool raises NotImplementedError there. The job's
        message was never acknowledged, so it is delivered again (or the watchdog dispatches
        its call again once the worker's heartbeats stop). Asked for one job alone (a revoke
        with ``terminate``), the job runs on to its end: the process, with its other jobs,
        is not ended for it.
        """
        logger.warning("A running job's thread cannot be killed: on a cold shutdown it ends "
                       "with this process and its call is run again elsewhere; else it runs on.")
        _exit_if_cold_shutdown()

    def on_apply(self, *args: Any, **kwargs: Any) -> Any:
        """Hand the job to a pool thread, then wait for it to finish, up to the head start."""
        result = super().on_apply(*args, **kwargs)
        if self.head_start:
            result.wait(self.head_start)  # blocks without the GIL: the job has it to itself
        else:
            time.sleep(0)  # at least let the woken pool thread take the GIL first
        return result


_COLD_EXIT_SECONDS = 3.0
"""How long a cold shutdown may take to close its connections before the process ends."""
_COLD_SIGN_SECONDS = 2.0
"""How long after a job is terminated a cold shutdown has to show (see below)."""
_exiting = threading.Lock()


def _exit_if_cold_shutdown() -> None:
    """End the process shortly if a cold shutdown is what terminates jobs.

    Python joins the threads of a ``ThreadPoolExecutor`` (where sync tools run) at exit: a
    cold shutdown would otherwise wait for every running tool to return, which is what a
    cold shutdown is meant not to do. Celery terminates the jobs first and marks the cold
    shutdown (``should_terminate``) right after; a revoke of one job never marks it. Once is
    enough however many jobs are terminated.
    """
    if not _exiting.acquire(blocking=False):
        return

    def watch() -> None:
        deadline = time.monotonic() + _COLD_SIGN_SECONDS
        while time.monotonic() < deadline:
            if worker_state.should_terminate not in (None, False):
                time.sleep(_COLD_EXIT_SECONDS)
                _end_process()
                return
            time.sleep(0.05)
        _exiting.release()  # a revoke: the next termination looks again

    threading.Thread(target=watch, name="adk-celery-cold-exit", daemon=True).start()


def _end_process() -> None:
    logging.shutdown()
    os._exit(1)  # Celery's exit status for a cold shutdown (EX_FAILURE)
