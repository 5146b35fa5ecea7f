"""Embedded mode: the distributed protocol in one process, with no Redis and no Celery.

Remote tool calls run as asyncio tasks through the same executor workers use, and come back
through the same store-result-then-resume path; everything above the transport is the code
the Celery mode runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine
from typing import Any

from google.genai import types

from orchestrator import platform
from orchestrator.agents.base_agent import BaseAgent
from orchestrator.artifacts.in_memory_artifact_service import InMemoryArtifactService
from orchestrator.backends.memory.stores import InMemoryInvocationStore, InMemorySessionQueue
from orchestrator.backends.memory.streams import InMemoryEventStream
from orchestrator.distributed.executor import execute_agent_job, execute_tool_job
from orchestrator.distributed.intake import (
    check_custom_metadata,
    check_identifier,
    check_message,
    check_optional_identifier,
    check_state_delta,
)
from orchestrator.distributed.models import (
    AgentJob,
    InvocationRecord,
    InvocationStatus,
    ToolJob,
    ToolResult,
)
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.service import InvocationService
from orchestrator.distributed.stores import SessionKey
from orchestrator.distributed.streams import StreamItem
from orchestrator.distributed.transport import default_route
from orchestrator.events.event import Event
from orchestrator.memory.in_memory_memory_service import InMemoryMemoryService
from orchestrator.sessions.in_memory_session_service import InMemorySessionService
from orchestrator.tools.base_tool import BaseTool


class LocalTransport:
    """Runs remote-routed tool calls as asyncio tasks in this process."""

    def __init__(
        self,
        runtime: EmbeddedRuntime,
        *,
        default_queue: str,
        tool_queues: dict[str, str],
        agents_queue: str | None = "agents",
    ) -> None:
        self._runtime = runtime
        self._default_queue = default_queue
        self._tool_queues = tool_queues
        self._agents_queue = agents_queue
        self._tasks: set[asyncio.Task[None]] = set()
        self._submitted: set[tuple[str, str]] = set()
        """(invocation, call) of every job started: each call's job starts once."""

    def route(self, tool: BaseTool) -> str | None:
        """Long-running and explicitly routed tools go "remote" (to an asyncio task)."""
        return default_route(tool, default_queue=self._default_queue, tool_queues=self._tool_queues)

    async def submit(self, job: ToolJob) -> None:
        """Start the job in the background (once per call)."""
        if self._first_submit(job):
            self._spawn(self._runtime._run_job(job), job)

    def prepare_with_commit(self, job: ToolJob) -> None:
        """Nothing to send with a commit: jobs start when submitted, after it."""
        return None

    def route_agent(self, agent: BaseAgent) -> str | None:
        """ParallelAgent branches run as background tasks (when an agents queue is set)."""
        return self._agents_queue

    async def submit_agent(self, job: AgentJob) -> None:
        """Start the branch in the background (once per call)."""
        if self._first_submit(job):
            self._spawn(self._runtime._run_agent_job(job), job)

    def _first_submit(self, job: ToolJob | AgentJob) -> bool:
        key = (job.invocation_id, job.function_call_id)
        if key in self._submitted:
            return False
        self._submitted.add(key)
        return True

    def _spawn(self, coro: Coroutine[Any, Any, None], job: ToolJob | AgentJob) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        key = (job.invocation_id, job.function_call_id)
        task.add_done_callback(lambda _: self._submitted.discard(key))


class _PublishingStore(InMemoryInvocationStore):
    """The in-memory store, also publishing each status change on the live event stream."""

    def __init__(self, stream: InMemoryEventStream) -> None:
        super().__init__()
        self._stream = stream

    async def create(self, record: InvocationRecord) -> bool:
        """Store a new record unless one exists; publish its status when stored."""
        created = await super().create(record)
        if created:
            await self._stream.publish_status(record.app_name, record.invocation_id, record.status)
        return created

    async def save(self, record: InvocationRecord) -> None:
        """Overwrite, wake watchers, and publish the status."""
        await super().save(record)
        await self._stream.publish_status(record.app_name, record.invocation_id, record.status)


class _RuntimeSessions(InMemorySessionService):
    """The runtime's sessions: deleting one ends its unfinished invocations (as on Redis)."""

    def __init__(self, deleted: Callable[[SessionKey], None]) -> None:
        super().__init__()
        self._deleted = deleted

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session if it exists; its invocations that cannot go on end failed."""
        await super().delete_session(app_name=app_name, user_id=user_id, session_id=session_id)
        self._deleted((app_name, user_id, session_id.strip() if session_id else session_id))


class EmbeddedRuntime:
    """Enqueue, follow, answer and cancel invocations in process (the no-Redis default)."""

    def __init__(
        self,
        registry: AppRegistry,
        *,
        default_queue: str = "tools",
        tool_queues: dict[str, str] | None = None,
        agents_queue: str | None = "agents",
    ) -> None:
        self.registry = registry
        self.session_service = _RuntimeSessions(self._session_deleted)
        self.artifact_service = InMemoryArtifactService()
        self.event_stream = InMemoryEventStream(pause_over=self._pause_over)
        """Every event of every invocation as it happens (see :meth:`follow`)."""
        self.store: InMemoryInvocationStore = _PublishingStore(self.event_stream)
        self._queue = InMemorySessionQueue(self.store)
        self.transport = LocalTransport(
            self, default_queue=default_queue, tool_queues=tool_queues or {},
            agents_queue=agents_queue,
        )
        self.service = InvocationService(
            registry,
            session_service=self.session_service,
            store=self.store,
            queue=self._queue,
            transport=self.transport,
            artifact_service=self.artifact_service,
            memory_service=InMemoryMemoryService(),
            event_sink=self.event_stream.publish,
            abandoned_chunks=self.event_stream.abandoned_chunks,
            # Never a second answer to a call, as the Redis back-end's leased writer.
            writer_for=lambda key, token, record: (self.session_service.answer_once_writer(), None),
        )
        self._drains: set[asyncio.Task[bool]] = set()

    def _wake(self, key: SessionKey | None) -> None:
        if key is None:
            return
        task = asyncio.ensure_future(self.service.drain(key))
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    def _session_deleted(self, key: SessionKey) -> None:
        if self._queue.session_deleted(key):
            self._wake(key)

    async def _run_agent_job(self, job: AgentJob) -> None:
        await self._execute(job, lambda: execute_agent_job(
            job, self.registry, artifact_service=self.artifact_service))

    async def _run_job(self, job: ToolJob) -> None:
        await self._execute(job, lambda: execute_tool_job(
            job, self.registry, artifact_service=self.artifact_service))

    async def _execute(
        self, job: ToolJob | AgentJob, run: Callable[[], Awaitable[ToolResult]]
    ) -> None:
        """Run a job and hand its result back; skipped if its invocation was cancelled.

        Also skipped if its call has a stored result (its answer, or the placeholder of a
        call left to an outside answer): a job sent again runs nothing, as a worker skips it.
        """
        if await self.store.is_cancelled(job.app_name, job.invocation_id):
            return
        if job.function_call_id in await self.store.results(job.app_name, job.invocation_id):
            return
        self._wake(await self.service.deliver(job.app_name, job.invocation_id, await run()))

    async def enqueue(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str | None = None,
        new_message: types.Content | str | None = None,
        state_delta: dict[str, Any] | None = None,
        streaming: bool = False,
        custom_metadata: dict[str, Any] | None = None,
    ) -> str:
        """Queue a message for a session (created when ``session_id`` is None); return the id.

        ``streaming`` runs the model calls with SSE streaming, so partial chunks reach
        :meth:`follow` before each committed answer. RequestError (nothing stored) for a
        malformed id, a message carrying function calls or responses, or a state delta a
        client may not apply (see :mod:`orchestrator.distributed.intake`).
        """
        limits = self.service.limits
        check_identifier("app_name", app_name, limits)
        check_identifier("user_id", user_id, limits)
        check_optional_identifier("session_id", session_id, limits)
        if isinstance(new_message, str):
            new_message = types.Content(role="user", parts=[types.Part(text=new_message)])
        if new_message is not None:
            check_message(new_message)  # answers go through answer(), which checks them
        check_state_delta(state_delta, limits)
        check_custom_metadata(custom_metadata, limits)
        if session_id is None:
            session = await self.session_service.create_session(app_name=app_name, user_id=user_id)
            session_id = session.id
        record = InvocationRecord(
            invocation_id=platform.new_invocation_id(),
            app_name=app_name,
            user_id=user_id,
            session_id=session_id,
            new_message=new_message.model_dump(mode="json", exclude_none=True) if new_message else None,
            state_delta=state_delta,
            streaming=streaming,
            custom_metadata=custom_metadata,
        )
        await self.service.submit(record)
        self._wake((app_name, user_id, session_id))
        return record.invocation_id

    async def status(self, app_name: str, invocation_id: str) -> InvocationRecord | None:
        """The invocation's record."""
        return await self.store.get(app_name, invocation_id)

    async def wait(
        self, app_name: str, invocation_id: str, *, timeout: float | None = None,
        until: Collection[InvocationStatus] = InvocationStatus.SETTLED,
    ) -> InvocationRecord:
        """Wait until the invocation is paused or finished (or another status set)."""
        return await asyncio.wait_for(
            self.store.wait_for(app_name, invocation_id, set(until)), timeout
        )

    async def follow(
        self,
        app_name: str,
        invocation_id: str,
        *,
        from_start: bool = True,
        until: Collection[InvocationStatus] = InvocationStatus.SETTLED,
        timeout: float | None = None,
    ) -> AsyncIterator[StreamItem]:
        """Yield the invocation's events and status changes as they happen.

        Partial chunks included, replayed from the invocation's start; stops at a finished
        status, or at the current status if it is in ``until`` (default: paused; see
        :meth:`RedisEventStream.follow`). TimeoutError after ``timeout`` seconds.
        """
        async for item in self.event_stream.follow(
            app_name, invocation_id, from_start=from_start, until=until, timeout=timeout
        ):
            yield item

    async def _pause_over(self, app_name: str, invocation_id: str) -> bool:
        """True if the invocation is no longer paused, or its pause has every answer stored."""
        record = await self.store.get(app_name, invocation_id)
        if record is None or record.status is not InvocationStatus.PAUSED:
            return record is not None
        results = await self.store.results(app_name, invocation_id)
        return bool(record.pending_calls) and all(
            cid in results and results[cid].answered for cid in record.pending_calls)

    async def events(self, app_name: str, invocation_id: str) -> list[Event]:
        """The committed events of the invocation, oldest first."""
        record = await self.store.get(app_name, invocation_id)
        if record is None:
            return []
        session = await self.session_service.get_session(
            app_name=app_name, user_id=record.user_id, session_id=record.session_id
        )
        return [e for e in session.events if e.invocation_id == invocation_id] if session else []

    async def answer(
        self, app_name: str, invocation_id: str, function_call_id: str, response: dict[str, Any]
    ) -> None:
        """Answer a pending call from outside."""
        self._wake(await self.service.answer(app_name, invocation_id, function_call_id, response))

    async def cancel(self, app_name: str, invocation_id: str) -> None:
        """Cancel the invocation."""
        self._wake(await self.service.cancel(app_name, invocation_id))
