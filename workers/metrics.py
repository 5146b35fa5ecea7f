"""Prometheus metrics of one orchestrator or worker process, served on its own port.

What only a process knows is measured where it happens, in memory, and served by that
process (``ADK_CELERY_METRICS_PORT`` or ``--metrics-port``; off by default): model and tool
call durations (through the core's :mod:`orchestrator.observe` hooks), the statuses its
orchestrator saved and how long each finished invocation took from its enqueueing, and what
its watchdog dispatched again or answered. Prometheus adds the processes up. What holds for
the whole deployment (invocations by status, queue depths, stuck work, takeovers) is read
from Redis when ``adk-celery api``'s ``/metrics`` is scraped (``workers/api/metrics_route.py``).

Labels are bounded: app, agent and tool names (what the configured apps register), statuses
and fixed reasons; never an invocation, session or user id. The hot path pays a dictionary
lookup and a lock per observation, and no I/O.

Processes of ``--pool prefork`` are not covered: only the main process serves, and the
children (which run the jobs, or an orchestrator's Runner loops) count in their own memory.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery import signals
from prometheus_client import Counter, Histogram, start_http_server

from config import Settings
from orchestrator import observe
from orchestrator.distributed.models import InvocationStatus
from workers.celery_app import app_settings

logger = logging.getLogger(__name__)

_CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
                 120, 300, 600)
_INVOCATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
                       600, 1800, 3600, 4 * 3600, 24 * 3600)

MODEL_CALL_SECONDS = Histogram(
    "adk_celery_model_call_seconds", "Model calls, by agent: time waiting for the model "
    "(its whole stream when streamed).", ["agent", "outcome"], buckets=_CALL_BUCKETS)
TOOL_CALL_SECONDS = Histogram(
    "adk_celery_tool_call_seconds", "Tool calls, by tool: how long the tool ran (on a worker "
    "for remote calls, in the orchestrator otherwise).", ["tool", "outcome"],
    buckets=_CALL_BUCKETS)
STATUS_CHANGES = Counter(
    "adk_celery_invocation_status_changes_total", "Invocations an orchestrator saved in a "
    "status (running, paused, completed, failed, cancelled), by app.", ["app", "status"])
INVOCATION_SECONDS = Histogram(
    "adk_celery_invocation_seconds", "Finished invocations: from enqueueing to the final "
    "status, by app and status.", ["app", "status"], buckets=_INVOCATION_BUCKETS)
REDELIVERIES = Counter(
    "adk_celery_redeliveries_total", "Jobs the watchdog dispatched again: kind tool or branch; "
    "cause worker_died (a running job went silent) or message_lost (never claimed).",
    ["kind", "cause"])
WATCHDOG_ANSWERS = Counter(
    "adk_celery_watchdog_answers_total", "Calls the watchdog answered with an error: reason "
    "timeout (past its deadline) or gave_up (its worker died too often).", ["reason"])


class PrometheusObserver:
    """The core's observer (:class:`orchestrator.observe.Observer`) writing the metrics above."""

    def model_call(self, agent: str, seconds: float, failed: bool) -> None:
        """Observe one model call."""
        MODEL_CALL_SECONDS.labels(agent, "error" if failed else "ok").observe(seconds)

    def tool_call(self, tool: str, seconds: float, failed: bool) -> None:
        """Observe one tool call."""
        TOOL_CALL_SECONDS.labels(tool, "error" if failed else "ok").observe(seconds)

    def invocation_status(self, app: str, status: str, created_at: float) -> None:
        """Count a status change; time a finished invocation from its enqueueing."""
        STATUS_CHANGES.labels(app, status).inc()
        if status in InvocationStatus.FINISHED:
            INVOCATION_SECONDS.labels(app, status).observe(max(0.0, time.time() - created_at))


_lock = threading.Lock()
_served: dict[str, int] = {}


def serve(settings: Settings | None = None, port: int | None = None) -> int | None:
    """Measure this process and serve its metrics over HTTP; the port, or None when off.

    ``port`` (else ``ADK_CELERY_METRICS_PORT``) 0 = off. Serves once per process.
    """
    settings = settings or app_settings()
    port = settings.metrics_port if port is None else port
    if port <= 0:
        return None
    with _lock:
        if "port" not in _served:
            start_http_server(port, addr=settings.metrics_address)
            observe.set_observer(PrometheusObserver())
            _served["port"] = port
            logger.info("Metrics on http://%s:%d/metrics", settings.metrics_address, port)
        return _served["port"]


@signals.worker_ready.connect
def _serve_when_ready(**_: Any) -> None:
    """Serve the metrics of an orchestrator or worker once Celery is ready (if asked to)."""
    try:
        serve()
    except (OSError, OverflowError) as error:  # taken, or no port: say so, run on without
        logger.error("Metrics not served on port %s: %s", app_settings().metrics_port, error)
