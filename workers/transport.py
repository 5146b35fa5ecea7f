"""CeleryTransport: remote tool calls become ``adk_celery.run_tool`` tasks on named queues."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from celery import Celery

from config import Settings
from orchestrator import failpoints
from orchestrator.agents.base_agent import BaseAgent
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.jobs import (
    PUBLISH,
    PublishOnce,
    job_digest,
    job_publish,
    queued_look_after,
    watch_member,
)
from orchestrator.distributed.models import AgentJob, ToolJob
from orchestrator.distributed.transport import default_route, effective_timeout
from orchestrator.tools.base_tool import BaseTool
from workers import wire_json
from workers.celery_app import TASK_RUN_AGENT, TASK_RUN_TOOL, kwargs_repr
from workers.publish_commands import CommandProducer, RedisCommand, collects_publishes


def job_task_id(invocation_id: str, function_call_id: str, attempt: int) -> str:
    """The Celery task id of one attempt of a call's job (what Flower and the backend know it by).

    Attempt 1 is ``<invocation>:<call>``; a later one, dispatched again by the watchdog,
    ends in ``:<attempt>``, so each attempt is a task of its own.
    """
    task_id = f"{invocation_id}:{function_call_id}"
    return task_id if attempt <= 1 else f"{task_id}:{attempt}"


def tool_route(tool: BaseTool, settings: Settings) -> str | None:
    """The queue ``tool``'s calls go to with ``settings`` (None: run in the orchestrator)."""
    return default_route(tool, default_queue=settings.tools_queue, tool_queues=settings.tool_queues)


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
        self._journal = PUBLISH.register(redis) if redis is not None else None
        self._watch_key = keys.job_watch(settings.invocations_queue)
        self._producer: CommandProducer | None = None
        self._producer_lock = threading.Lock()

    @property
    def app(self) -> Celery:
        """The Celery app jobs are sent with (its result backend holds their tasks' states)."""
        return self._app

    def route(self, tool: BaseTool) -> str | None:
        """Long-running tools and tools listed in ``tool_queues`` run on workers."""
        return tool_route(tool, self._settings)

    def route_agent(self, agent: BaseAgent) -> str | None:
        """The queue for ``agent``'s branch jobs: its own (``agent_queues``) or the agents queue."""
        return self._settings.agent_queues.get(agent.name) or self._settings.agents_queue or None

    async def submit_agent(self, job: AgentJob) -> None:
        """Publish a branch job; Flower shows it as ``adk_celery.run_agent:<agent>``."""
        await self._publish(TASK_RUN_AGENT, job, job.queue or self._settings.agents_queue,
                            job.agent_name, {"agent_name": job.agent_name, "branch": job.branch})

    async def submit(self, job: ToolJob) -> None:
        """Publish the job; Flower shows it as ``adk_celery.run_tool:<tool>``.

        A first attempt gets its deadline as it is journaled (the tool's timeout, else the
        settings', from then by Redis's clock); later attempts keep it.
        """
        queue, fields = self._tool_message(job)
        await self._publish(TASK_RUN_TOOL, job, queue, job.tool_name, fields)

    def prepare_with_commit(self, job: ToolJob) -> PublishOnce | None:
        """The journal entry and broker message of ``job``, for its call event's append.

        Only on the fast path (messages built as Redis commands, see
        :mod:`workers.publish_commands`) and to a queue already declared (declaring blocks);
        else None, and the job is submitted after the commit.
        """
        queue, fields = self._tool_message(job)
        producer = self._producer
        if self._redis is None or producer is None or not producer.has_declared(queue):
            return None
        kwargs = job.model_dump(mode="json")
        options = self._options(TASK_RUN_TOOL, job, kwargs, queue, job.tool_name, fields)
        commands = producer.commands(self._sending(TASK_RUN_TOOL, options))
        return self._publish_operands(job, kwargs, queue, commands)

    def _tool_message(self, job: ToolJob) -> tuple[str, dict[str, Any]]:
        """``job``'s queue, and what Flower shows of it."""
        return job.queue or self._settings.tools_queue, {"tool_name": job.tool_name, "args": job.args}

    def _sending(self, task: str, options: dict[str, Any]) -> Callable[[Any], object]:
        """What sends ``task`` with ``options`` through a given producer."""
        return lambda producer: self._app.send_task(task, producer=producer, **options)

    def _options(
        self, task: str, job: ToolJob | AgentJob, kwargs: dict[str, Any], queue: str,
        shown_as: str, fields: dict[str, Any],
    ) -> dict[str, Any]:
        """``send_task``'s options for ``job`` (``kwargs``: the job as sent)."""
        options: dict[str, Any] = {
            "kwargs": kwargs,
            "queue": queue,
            "serializer": wire_json.NAME,  # a tool's arguments and state reach it unchanged
            "shadow": f"{task}:{shown_as}",
            "task_id": job_task_id(job.invocation_id, job.function_call_id, job.attempt),
            # The worker stores the result itself: no result-backend subscription per job.
            "ignore_result": True,
            "argsrepr": "()",
            "kwargsrepr": kwargs_repr({
                "app_name": job.app_name, "invocation_id": job.invocation_id,
                "function_call_id": job.function_call_id, **fields,
            }),
        }
        return options

    async def _publish(
        self, task: str, job: ToolJob | AgentJob, queue: str, shown_as: str, fields: dict[str, Any]
    ) -> None:
        """Send ``job`` as ``task`` on ``queue``, journaled with its digest.

        The digest of the exact keyword arguments sent is what a worker checks the job it
        receives against (see :func:`~orchestrator.backends.redis.jobs.job_digest`).
        """
        kwargs = job.model_dump(mode="json")
        options = self._options(task, job, kwargs, queue, shown_as, fields)
        if self._redis is None:
            if await self._publish_once(job, kwargs, queue, []):
                failpoints.hit("dispatch.journaled_before_send")
                await asyncio.to_thread(self._app.send_task, task, **options)
            return
        send = self._sending(task, options)
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
        return bool(await self._journal(self._publish_operands(job, kwargs, queue, commands)))

    def _publish_operands(
        self, job: ToolJob | AgentJob, kwargs: dict[str, Any], queue: str,
        commands: list[RedisCommand],
    ) -> PublishOnce:
        """The journal entry of ``job`` (``kwargs``: as sent) and ``commands`` sending it."""
        # A duration, not a time: the journal's script sets the deadline by Redis's clock,
        # the one the watchdog judges it by (this process's clock may be off).
        timeout = effective_timeout(job.timeout_seconds, self._settings.tool_timeout_seconds) \
            if isinstance(job, ToolJob) else None
        dispatch: dict[str, Any] = {"queue": queue}
        for name, args in commands:
            if name == "lpush":  # the message itself: the watchdog looks for it in its queue
                dispatch["queue_key"], dispatch["message"] = args[0], args[1]
        if "message" not in dispatch:  # else the job is read back from the message
            dispatch["job"] = kwargs
        return PublishOnce(
            jobs=keys.invocation_jobs(job.app_name, job.invocation_id), watch=self._watch_key,
            job=job_publish(
                call_id=job.function_call_id, attempt=job.attempt, dispatch=dispatch,
                ttl=self._settings.record_ttl_seconds,
                member=watch_member(job.app_name, job.invocation_id, job.function_call_id),
                look_after=queued_look_after(self._settings.job_lost_after_seconds),
                timeout=timeout, digest=job_digest(kwargs),
                commands=commands).flat())

    def warm_up(self) -> None:
        """Connect and declare the tool queues now, so that no job waits for it: blocks.

        An orchestrator calls it once at start-up, in a thread; until a queue is declared,
        its jobs go out after their call's commit rather than with it.
        """
        if self._redis is None:
            return
        with self._producer_lock:
            producer = self._producer = self._producer or CommandProducer(self._app)
        for name in sorted({self._settings.tools_queue, *self._settings.tool_queues.values()}):
            producer.declare(self._app.amqp.queues[name])

    def _commands(self, send: Any) -> list[RedisCommand]:
        producer = self._producer
        if producer is None:
            with self._producer_lock:
                producer = self._producer = self._producer or CommandProducer(self._app)
        return producer.commands(send)
