"""``GET /metrics``: the whole deployment as Prometheus gauges, read from Redis when scraped.

Invocations by status (queued, running, paused) and how many of them look stuck, the ones
that finished by status, sessions taken over from a dead orchestrator, the Celery queues'
depths, the invocation queue (wake-ups waiting for an orchestrator, and being worked on),
and remote calls out (and stuck). One Redis round trip per scrape
(:func:`~orchestrator.backends.redis.stats.read_cluster_stats`); no API process keeps any
of it, so every API process answers the same. Per-process durations and counters (model and
tool calls, redeliveries) are served by each orchestrator and worker (``workers.metrics``).

Behind the bearer tokens like the other routes, with a token that opens every app
(``["*"]``: the figures are the whole deployment's), unless ``ADK_CELERY_API_METRICS_PUBLIC``.
With Redis unreachable it answers 503, saying so (and logs one line).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import redis
from fastapi import APIRouter, HTTPException, Request, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from config import Settings
from orchestrator.agents.base_agent import BaseAgent
from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.backends.redis.stats import ClusterStats, read_cluster_stats
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.transport import QUEUE_METADATA_KEY
from orchestrator.tools.base_tool import BaseTool
from workers.api.adk_routes import backend_of
from workers.api.security import ANY_APP

logger = logging.getLogger(__name__)
router = APIRouter(tags=["metrics"])
PATH = "/metrics"


@router.get(PATH, response_class=Response)
async def metrics(request: Request) -> Response:
    """The deployment's gauges and counters, in Prometheus' text format."""
    backend = backend_of(request)
    settings = backend.settings
    if not settings.api_metrics_public:
        apps = backend.access.apps_of(request)  # 401 without a token
        if apps is not None and ANY_APP not in apps:
            raise HTTPException(403, "metrics cover every app: they need a token for \"*\"")
    try:
        services = await backend.services()
        stats = await read_cluster_stats(
            services.redis, invocations_queue=settings.invocations_queue,
            queues=queue_names(settings, backend.registry), record_ttl=settings.record_ttl_seconds,
            stuck_after=settings.metrics_stuck_after_seconds)
    except (redis.ConnectionError, redis.TimeoutError, OSError) as error:
        logger.warning("GET /metrics: Redis is unreachable (%s: %s)", type(error).__name__, error)
        raise HTTPException(503, "Redis is unreachable: the deployment's metrics cannot be read "
                                 "now") from None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(stats))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def queue_names(settings: Settings, registry: AppRegistry) -> list[str]:
    """The Celery queues of the deployment: from the settings and the apps' tool metadata."""
    names = [settings.invocations_queue, settings.tools_queue, settings.agents_queue,
             *settings.tool_queues.values(), *settings.agent_queues.values()]
    for app in registry:
        names += _metadata_queues(app.root_agent)
    return [name for name in dict.fromkeys(names) if name]


def _metadata_queues(agent: BaseAgent) -> list[str]:
    found: list[str] = []
    if isinstance(agent, LlmAgent):
        for tool in agent.tools:
            if isinstance(tool, BaseTool):
                queue = (tool.custom_metadata or {}).get(QUEUE_METADATA_KEY)
                if isinstance(queue, str):
                    found.append(queue)
    for sub in agent.sub_agents:
        found += _metadata_queues(sub)
    return found


class _Snapshot:
    """A collector of one :class:`ClusterStats` (a registry per scrape)."""

    def __init__(self, stats: ClusterStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        """The metrics of the snapshot."""
        stats = self._stats
        invocations = GaugeMetricFamily(
            "adk_celery_invocations", "Invocations now queued, running or paused.",
            labels=["status"])
        for status, count in stats.invocations.items():
            invocations.add_metric([status], count)
        yield invocations
        stuck = GaugeMetricFamily(
            "adk_celery_invocations_stuck", "Invocations queued or running without a status "
            "change for ADK_CELERY_METRICS_STUCK_AFTER_SECONDS.", labels=["status"])
        for status, count in stats.stuck_invocations.items():
            stuck.add_metric([status], count)
        yield stuck
        finished = CounterMetricFamily(
            "adk_celery_invocations_finished", "Invocations that ended, by final status.",
            labels=["status"])
        for status in InvocationStatus:  # in the enum's order, not the set's
            if status.is_finished:
                finished.add_metric([status.value], stats.finished.get(status.value, 0))
        yield finished
        yield CounterMetricFamily(
            "adk_celery_lease_takeovers", "Sessions an orchestrator took over with work a "
            "previous holder left unfinished (it died, or stalled past its lease).",
            value=stats.takeovers)
        queues = GaugeMetricFamily(
            "adk_celery_queue_messages", "Messages waiting in each Celery queue.", labels=["queue"])
        for queue, length in stats.queue_lengths.items():
            queues.add_metric([queue], length)
        yield queues
        wakeups = GaugeMetricFamily(
            "adk_celery_wakeups", "The invocation queue: wake-ups waiting for an orchestrator, "
            "and claimed by one (sessions being worked on).", labels=["state"])
        wakeups.add_metric(["waiting"], stats.wakeups_waiting)
        wakeups.add_metric(["claimed"], stats.wakeups_claimed)
        yield wakeups
        yield GaugeMetricFamily("adk_celery_calls_out", "Remote calls whose job is out and "
                                "unanswered.", value=stats.calls_out)
        yield GaugeMetricFamily(
            "adk_celery_calls_stuck", "Remote calls overdue for the watchdog's look by more "
            "than ADK_CELERY_METRICS_STUCK_AFTER_SECONDS (no orchestrator is watching).",
            value=stats.stuck_calls)
