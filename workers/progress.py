"""A worker's side of ``report_progress``: the call's status and the invocation's live stream.

``tool_context.report_progress`` is synchronous and may be called from a tool's thread or
from the event loop an async tool runs on; this writes with a synchronous client of its own
(one script, one round trip per report; see :mod:`orchestrator.backends.redis.progress`).
Flower's ``PROGRESS`` state is written beside it, by ``workers.tasks``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import redis

from config import Settings
from orchestrator.backends.redis.codec import dumps
from orchestrator.backends.redis.connection import connect_sync
from orchestrator.backends.redis.progress import REPORT, report_operands
from orchestrator.distributed.models import ToolJob

logger = logging.getLogger(__name__)


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
