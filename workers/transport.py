"""CeleryTransport: remote tool calls become ``adk_celery.run_tool`` tasks on named queues."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import redis.asyncio as aioredis
from celery import Celery

from config import Settings
from orchestrator import redis_keys as keys
from orchestrator.agents.base_agent import BaseAgent
from orchestrator.distributed.models import AgentJob, ToolJob
from orchestrator.distributed.transport import default_route
from orchestrator.tools.base_tool import BaseTool
from workers.broker import CommandProducer, RedisCommand, collects_publishes
from workers.celery_app import TASK_RUN_AGENT, TASK_RUN_TOOL, kwargs_repr

# KEYS: the invocation's jobs hash. ARGV: call id, dispatch entry JSON, ttl seconds, number
# of commands, then each command as name, argument count, arguments (what kombu would send
# for the message and its task-sent event: an LPUSH and a PUBLISH). 1 if published, 0 if
# the call had an entry already (nothing sent).
PUBLISH_ONCE = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('EXPIRE', KEYS[1], ARGV[3])
local i = 5
for _ = 1, tonumber(ARGV[4]) do
  local name, count = ARGV[i], tonumber(ARGV[i + 1])
  redis.call(name, unpack(ARGV, i + 2, i + 1 + count))
  i = i + 2 + count
end
return 1
"""


def dispatch_entry(job: ToolJob | AgentJob, queue: str) -> str:
    """The jobs-hash entry of a dispatched job: attempt, queue, time, and the job itself."""
    return json.dumps({"attempt": job.attempt, "queue": queue, "state": "queued",
                       "at": time.time(), "job": job.model_dump(mode="json")},
                      separators=(",", ":"))


class CeleryTransport:
    """Sends tool jobs to workers; Flower shows them as ``adk_celery.run_tool:<tool>``.

    With ``redis`` (the caller's asyncio client on the broker's Redis) and the app on
    :mod:`workers.broker`'s transport, a job's message and its task-sent event are built by
    Celery and kombu as usual (:class:`~workers.broker.CommandProducer`) and sent on that
    client, from the event loop: one round trip, no thread. Otherwise ``send_task`` runs in
    a thread (publishing is blocking I/O).
    """

    def __init__(
        self, celery_app: Celery, settings: Settings, redis: aioredis.Redis | None = None
    ) -> None:
        self._app = celery_app
        self._settings = settings
        self._redis = redis if redis is not None and collects_publishes(celery_app) else None
        self._journal_client = redis
        self._publish_once = redis.register_script(PUBLISH_ONCE) if redis is not None else None
        self._producer: CommandProducer | None = None
        self._producer_lock = threading.Lock()

    def route(self, tool: BaseTool) -> str | None:
        """Long-running tools and tools listed in ``tool_queues`` run on workers."""
        return default_route(
            tool, default_queue=self._settings.tools_queue, tool_queues=self._settings.tool_queues
        )

    def route_agent(self, agent: BaseAgent) -> str | None:
        """The queue for ``agent``'s branch jobs: its own (``agent_queues``) or the agents queue."""
        return self._settings.agent_queues.get(agent.name) or self._settings.agents_queue or None

    async def submit_agent(self, job: AgentJob) -> None:
        """Publish a branch job; Flower shows it as ``adk_celery.run_agent:<agent>``."""
        await self._publish(TASK_RUN_AGENT, job, job.queue or self._settings.agents_queue,
                            job.agent_name, {"agent_name": job.agent_name, "branch": job.branch})

    async def submit(self, job: ToolJob) -> None:
        """Publish the job; Flower shows it as ``adk_celery.run_tool:<tool>``."""
        await self._publish(TASK_RUN_TOOL, job, job.queue or self._settings.tools_queue,
                            job.tool_name, {"tool_name": job.tool_name, "args": job.args})

    async def _publish(
        self, task: str, job: ToolJob | AgentJob, queue: str, shown_as: str, fields: dict[str, Any]
    ) -> None:
        """Send ``job`` as ``task`` on ``queue``."""
        options: dict[str, Any] = {
            "kwargs": job.model_dump(mode="json"),
            "queue": queue,
            "shadow": f"{task}:{shown_as}",
            "task_id": f"{job.invocation_id}:{job.function_call_id}",
            # The worker stores the result itself: no result-backend subscription per job.
            "ignore_result": True,
            "argsrepr": "()",
            "kwargsrepr": kwargs_repr({
                "app_name": job.app_name, "invocation_id": job.invocation_id,
                "function_call_id": job.function_call_id, **fields,
            }),
        }
        if job.attempt > 1:
            options["task_id"] += f":{job.attempt}"
        entry = dispatch_entry(job, queue)
        if self._redis is None:
            if await self._journal(job, entry):
                await asyncio.to_thread(self._app.send_task, task, **options)
            return

        def send(producer: Any) -> object:
            return self._app.send_task(task, producer=producer, **options)

        producer = self._producer
        if producer is not None and producer.has_declared(queue):
            commands = producer.commands(send)
        else:  # connecting and declaring the queue are blocking calls: once, in a thread
            commands = await asyncio.to_thread(self._commands, send)
        # The job's entry and its message are written by one script: a job is published if
        # and only if its entry exists, and a second submit of the same call sends nothing.
        await self._publish_once(
            keys=[keys.invocation_jobs(job.app_name, job.invocation_id)],
            args=[job.function_call_id, entry, self._settings.record_ttl_seconds, len(commands),
                  *(part for name, args in commands for part in (name, len(args), *args))],
        )

    async def _journal(self, job: ToolJob | AgentJob, entry: str) -> bool:
        """Without the broker's Redis at hand: write the entry first (True if it is new)."""
        client = self._journal_client
        if client is None:
            return True
        created = await client.hsetnx(
            keys.invocation_jobs(job.app_name, job.invocation_id), job.function_call_id, entry)
        return bool(created)

    def _commands(self, send: Any) -> list[RedisCommand]:
        producer = self._producer
        if producer is None:
            with self._producer_lock:
                producer = self._producer = self._producer or CommandProducer(self._app)
        return producer.commands(send)
