"""Task events sent on a task's behalf, for Flower: best effort, never kept back, never raised.

Celery's workers send their own task events. Two more are sent from code of ours: a tool's
``task-progress`` (its worker, :mod:`workers.progress`) and the ``task-failed`` of an attempt
whose worker died (the orchestrators' watchdog, :mod:`workers.lost_attempts`). Both are for
an operator's eyes only, so neither may change what happens to the call: a broker out of
reach is logged, not raised.

Nor is an event that could not be sent kept for later. A Celery event dispatcher by default
buffers such an event until its owner flushes the buffer; a worker's own dispatcher is
flushed when its consumer reconnects, but nothing would ever flush these, so every event of
an outage would stay in memory for the process's life, and its failure out of sight. Built
unbuffered, the failure is raised to :meth:`TaskEvents.send`, which logs it and drops the
dispatcher: the next event connects afresh.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery

logger = logging.getLogger(__name__)


class TaskEvents:
    """Sends task events under one node name (``hostname``) through ``app``'s broker.

    Thread-safe: one dispatcher, used under a lock (kombu's producers are not shared across
    threads), built on first use and again after a failure.
    """

    def __init__(self, app: Celery, hostname: str | None) -> None:
        self._app, self._hostname = app, hostname
        self._dispatcher: Any = None
        self._lock = threading.Lock()

    def send(self, event_type: str, **fields: Any) -> bool:
        """Send one event; True if the broker took it. Never raises: a failure is logged.

        Blocks for a broker publish (and, after a failure, a connect): call it off an event
        loop.
        """
        try:
            with self._lock:
                if self._dispatcher is None:
                    self._dispatcher = self._app.events.Dispatcher(
                        self._app.connection_for_write(), hostname=self._hostname,
                        enabled=True, buffer_while_offline=False)
                self._dispatcher.send(event_type, **fields)
            return True
        except Exception as error:  # the operator's view only: never the call's outcome
            logger.warning("The %s event of task %s was not sent (%s: %s)", event_type,
                           fields.get("uuid"), type(error).__name__, error)
            self.close()
            return False

    def close(self) -> None:
        """Release the dispatcher's broker connection (the next event connects afresh)."""
        with self._lock:
            dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is not None:
            try:
                dispatcher.close()
                dispatcher.connection.release()
            except Exception as error:  # a connection already broken
                logger.debug("Closing the event dispatcher failed (%s)", error)
