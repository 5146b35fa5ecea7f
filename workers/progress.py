"""A worker's side of ``report_progress``: the call's status and the invocation's live stream.

``tool_context.report_progress`` is synchronous and may be called from a tool's thread or
from the event loop an async tool runs on; this writes with a synchronous client of its own
(one script, one round trip per report; see :mod:`orchestrator.backends.redis.progress`).
Flower's ``PROGRESS`` state is written beside it (:func:`progress_reporter`, which a tool
job's Celery task hands its tool): as a task event (Flower's task list and page) and in
Celery's result backend through :class:`BackendProgress`, which removes it when the task ends.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from celery import Task, signals

from config import Settings
from orchestrator.backends.redis.codec import dumps
from orchestrator.backends.redis.connection import connect_sync
from orchestrator.backends.redis.progress import REPORT, report_operands
from orchestrator.distributed.models import ToolJob
from orchestrator.errors import is_infrastructure_error
from workers.task_events import TaskEvents
from workers.wire_json import envelope_path

logger = logging.getLogger(__name__)

PROGRESS_STATE = "PROGRESS"
"""The custom task state a progress report sets in Celery's result backend (Flower shows it)."""


def for_celery(payload: dict[str, Any]) -> dict[str, Any]:
    """What a progress report shows in Celery's channels (task events, the result backend).

    Those travel in Celery's stock ``json``, whose decoder turns an object shaped like
    kombu's type envelope (``{"__type__": ..., "__value__": ...}``) into a Python object, or
    refuses the whole message for a type it does not know: a tool echoing a model's or a
    user's data in its report could make Flower drop the task's ``PROGRESS`` event and
    make its result unreadable. Such a report is shown there as a note saying where the
    envelope is; the call's status and the live stream carry it whole.
    """
    try:
        text = json.dumps(payload)
    except (TypeError, ValueError):
        return payload  # not JSON: refused by the report itself before it gets here
    if '"__type__"' not in text:  # the walk below only when a key could be one
        return payload
    # Walked as JSON (keys made strings, tuples lists), as kombu's decoder will read it.
    where = envelope_path(json.loads(text), "progress")
    if where is None:
        return payload
    return {"not_shown": f"{where} is an object shaped like kombu's type envelope, which "
                         "Celery's json would decode; the invocation's status and live stream "
                         "show the report"}


class ProgressPublisher:
    """Writes progress reports of the jobs this process runs (thread-safe, lazily connected)."""

    def __init__(self, settings: Settings) -> None:
        self._url = settings.redis_url or ""
        self._max_bytes = settings.max_payload_bytes
        self._lock = threading.Lock()
        self._script: Any = None
        self._pid = 0

    def _report_script(self) -> Any:
        with self._lock:
            if self._script is None or self._pid != os.getpid():  # not across a fork
                client: redis.Redis = connect_sync(self._url)
                self._script, self._pid = REPORT.register(client), os.getpid()
            return self._script

    def publish(self, job: ToolJob, payload: dict[str, Any]) -> bool:
        """Record ``payload`` as the call's latest progress and add it to the live stream.

        False if it was not written: over ``max_payload_bytes`` (logged), or no longer this
        attempt's to report. TypeError or ValueError if it is not JSON (the tool's mistake).
        """
        if len(dumps(payload).encode()) > self._max_bytes:
            logger.warning("Progress of call %s dropped: over %d bytes (ADK_CELERY_MAX_PAYLOAD_BYTES)",
                           job.function_call_id, self._max_bytes)
            return False
        operands = report_operands(job.app_name, job.invocation_id, job.function_call_id,
                                   job.attempt, job.tool_name, time.time(), payload)
        return bool(self._report_script()(operands))


class BackendProgress:
    """A running tool task's ``PROGRESS`` state in Celery's result backend, removed at its end.

    ``adk_celery.run_tool`` keeps no result (``ignore_result``): nothing would overwrite the
    ``celery-task-meta-<task id>`` a progress report writes, and a finished task would stay
    ``PROGRESS``, with its last payload (the tool's data), until the backend expires it. So
    the first report marks the task, and its end (Celery's ``task_postrun``, in the thread
    that ran it) forgets that key; a report arriving after the end (from a thread the tool
    left behind) writes nothing. Made with :func:`backend_progress` as the task starts. A task
    whose worker died never ends: the job watchdog ends its state (:mod:`workers.lost_attempts`).
    """

    def __init__(self, task: Task, task_id: str) -> None:
        self._task = task
        self._task_id = task_id
        self._lock = threading.Lock()
        self._written = False
        self._ended = False

    def write(self, meta: dict[str, Any]) -> bool:
        """Set the task's state to ``PROGRESS`` with ``meta``; False once the task has ended."""
        with self._lock:  # an end waits for a write in flight, then forgets what it wrote
            if self._ended:
                return False
            self._written = True
            self._task.update_state(task_id=self._task_id, state=PROGRESS_STATE, meta=meta)
            return True

    def end(self) -> None:
        """Forget the ``PROGRESS`` state if one was written (later writes are refused)."""
        with self._lock:
            self._ended, written = True, self._written
        if not written:
            return
        try:
            self._task.backend.forget(self._task_id)
        except Exception as error:  # the backend already retried; the key expires anyway
            if not is_infrastructure_error(error) and not isinstance(error, OSError):
                raise
            logger.warning("PROGRESS state of task %s not removed (%s)", self._task_id, error)


_running_lock = threading.Lock()
_running: dict[tuple[str, int], BackendProgress] = {}


def backend_progress(task: Task, task_id: str) -> BackendProgress:
    """The result-backend progress of the task starting in this thread (ended with it)."""
    progress = BackendProgress(task, task_id)
    with _running_lock:
        _running[(task_id, threading.get_ident())] = progress
    return progress


@signals.task_postrun.connect(weak=False)
def _end_backend_progress(task_id: str | None = None, **_: Any) -> None:
    """A task ended (whichever way) in this thread: forget the PROGRESS state it wrote."""
    if task_id is None:
        return
    with _running_lock:
        progress = _running.pop((task_id, threading.get_ident()), None)
    if progress is not None:
        progress.end()


_task_events_lock = threading.Lock()
_task_events: dict[tuple[int, str | None], TaskEvents] = {}


def _events_of(task: Task, hostname: str | None) -> TaskEvents:
    """One task-event sender per process and hostname (opening one per report is slow)."""
    key = (os.getpid(), hostname)
    with _task_events_lock:
        events = _task_events.get(key)
        if events is None:
            events = _task_events[key] = TaskEvents(task.app, hostname)
    return events


def progress_reporter(
    task: Task, task_id: str | None, hostname: str | None, job: ToolJob, settings: Settings
) -> Callable[[dict[str, Any]], None]:
    """Where a tool's progress goes: its call's status and the live stream, and Flower.

    First the call's status and the invocation's live stream (:class:`ProgressPublisher`),
    then the result backend (state PROGRESS, removed when the task ends:
    :class:`BackendProgress`) and a task event. A report not written to the first (over the
    size limit, or of an attempt no longer out) goes to neither; nor does one after the task
    ended. ``settings``: the worker's, for the first one's Redis connection.

    Flower shows an event of type ``task-progress`` as the custom state ``PROGRESS``.
    """
    ids = {"invocation_id": job.invocation_id, "function_call_id": job.function_call_id,
           "tool": job.tool_name}
    backend = backend_progress(task, task_id) if task_id else None

    def report(payload: dict[str, Any]) -> None:
        try:
            if not _progress_publisher(settings).publish(job, payload) or backend is None:
                return
            shown = for_celery(payload)
            if not backend.write({**ids, "progress": shown}):
                return  # the task has ended
            # Best effort, logged there: a broker out of reach loses this event only.
            _events_of(task, hostname).send("task-progress", uuid=task_id, progress=shown, **ids)
        except Exception as error:  # progress is best effort: never the tool's failure
            if not is_infrastructure_error(error) and not isinstance(error, OSError):
                raise
            logger.warning("Progress of %s not reported (%s)", job.function_call_id, error)

    return report


_publisher_lock = threading.Lock()
_publisher: list[ProgressPublisher] = []


def _progress_publisher(settings: Settings) -> ProgressPublisher:
    """The process's progress publisher (built on first use)."""
    with _publisher_lock:
        if not _publisher:
            _publisher.append(ProgressPublisher(settings))
        return _publisher[0]
