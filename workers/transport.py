"""CeleryTransport: remote tool calls become ``adk_celery.run_tool`` tasks on named queues."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import redis.asyncio as aioredis
from celery import Celery

from config import Settings
from orchestrator.agents.base_agent import BaseAgent
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.jobs import (
    PUBLISH_ONCE,
    job_digest,
    publish_args,
    queued_look_after,
    watch_member,
)
from orchestrator.distributed.models import AgentJob, ToolJob
from orchestrator.distributed.transport import default_route
from orchestrator.tools.base_tool import BaseTool
from workers.celery_app import TASK_RUN_AGENT, TASK_RUN_TOOL, kwargs_repr
from workers.publish_commands import CommandProducer, RedisCommand, collects_publishes


class CeleryTransport:
    """Sends tool jobs to workers; Flower shows them as ``adk_celery.run_tool:<tool>``.

    With ``redis`` (the caller's asyncio client on the broker's Redis), the app on
    :mod:`workers.broker`'s transport and ``fast_publish`` on, a job's message and its
    task-sent event are built by Celery and kombu as usual
    (:class:`~workers.publish_commands.CommandProducer`) and sent on that client, from the
    event loop: one round trip, no thread. Otherwise ``send_task`` runs in
    a thread (publishing is blocking I/O). Either way ``redis`` journals each job with its
    digest; workers run only journaled jobs, so a transport without it sends jobs no worker
    will run.
    """

    def __init__(
        self, celery_app: Celery, settings: Settings, redis: aioredis.Redis | None = None
    ) -> None:
        self._app = celery_app
        self._settings = settings
        fast = settings.fast_publish and collects_publishes(celery_app)
        self._redis = redis if redis is not None and fast else None
        self._journal = redis.register_script(PUBLISH_ONCE) if redis is not None else None
        self._watch_key = keys.job_watch(settings.invocations_queue)
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
        """Publish the job; Flower shows it as ``adk_celery.run_tool:<tool>``.

        A first attempt gets its deadline here (the tool's timeout, else the settings');
        later attempts keep it.
        """
        timeout = job.timeout_seconds or self._settings.tool_timeout_seconds
        if job.deadline is None and timeout > 0:
            job = job.model_copy(update={"deadline": time.time() + timeout})
        await self._publish(TASK_RUN_TOOL, job, job.queue or self._settings.tools_queue,
                            job.tool_name, {"tool_name": job.tool_name, "args": job.args})

    async def _publish(
        self, task: str, job: ToolJob | AgentJob, queue: str, shown_as: str, fields: dict[str, Any]
    ) -> None:
        """Send ``job`` as ``task`` on ``queue``, journaled with its digest.

        The digest of the exact keyword arguments sent is what a worker checks the job it
        receives against (see :func:`~orchestrator.backends.redis.jobs.job_digest`).
        """
        kwargs = job.model_dump(mode="json")
        options: dict[str, Any] = {
            "kwargs": kwargs,
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
        if self._redis is None:
            if await self._publish_once(job, kwargs, queue, []):
                await asyncio.to_thread(self._app.send_task, task, **options)
            return

        def send(producer: Any) -> object:
            return self._app.send_task(task, producer=producer, **options)

        producer = self._producer
        if producer is not None and producer.has_declared(queue):
            commands = producer.commands(send)
        else:  # connecting and declaring the queue are blocking calls: once, in a thread
            commands = await asyncio.to_thread(self._commands, send)
        await self._publish_once(job, kwargs, queue, commands)

    async def _publish_once(
        self, job: ToolJob | AgentJob, kwargs: dict[str, Any], queue: str,
        commands: list[RedisCommand],
    ) -> bool:
        """Journal the job and send ``commands`` (its message) in one script; True if sent.

        A job is published if and only if its journal entry is written, and only once per
        attempt (see :mod:`orchestrator.backends.redis.jobs`). Without ``commands`` (a
        broker this transport cannot send on itself) only the journal is written, and the
        caller sends the message when this returns True. ``kwargs``: the job as sent.
        """
        if self._journal is None:
            return True
        now = time.time()
        score = now + queued_look_after(self._settings.job_lost_after_seconds)
        deadline = job.deadline if isinstance(job, ToolJob) else None
        if deadline is not None:
            score = min(score, deadline)  # the watchdog ends the call at its deadline
        dispatch: dict[str, Any] = {"queue": queue}
        for name, args in commands:
            if name == "lpush":  # the message itself: the watchdog looks for it in its queue
                dispatch["queue_key"], dispatch["message"] = args[0], args[1]
        if "message" not in dispatch:  # else the job is read back from the message
            dispatch["job"] = kwargs
        published = await self._journal(
            keys=[keys.invocation_jobs(job.app_name, job.invocation_id), self._watch_key],
            args=publish_args(
                job.function_call_id, job.attempt, dispatch, self._settings.record_ttl_seconds,
                watch_member(job.app_name, job.invocation_id, job.function_call_id),
                score, now, deadline, job_digest(kwargs), commands),
        )
        return bool(published)

    def _commands(self, send: Any) -> list[RedisCommand]:
        producer = self._producer
        if producer is None:
            with self._producer_lock:
                producer = self._producer = self._producer or CommandProducer(self._app)
        return producer.commands(send)
