"""The services one orchestrator or worker process uses, built lazily on each event loop it runs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.asyncio as aioredis
from celery import Celery
from google.genai import types
from redis.exceptions import NoScriptError

from config import Settings, get_settings
from orchestrator import platform
from orchestrator import redis_keys as keys
from orchestrator._redis_support import connect
from orchestrator.artifacts.redis_artifact_service import RedisArtifactService
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, WorkItem
from orchestrator.distributed.redis_queue import RedisSessionQueue
from orchestrator.distributed.redis_stores import RedisInvocationStore
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.service import InvocationService, session_key
from orchestrator.distributed.stores import SessionKey
from orchestrator.distributed.streams import RedisEventStream
from orchestrator.distributed.wakeups import RedisWakeups, WakeConsumer
from orchestrator.sessions.redis_session_scripts import check_created_if_absent
from orchestrator.sessions.redis_session_service import RedisSessionService
from orchestrator.tools.function_tool import sync_calls_inline
from workers.celery_app import app as default_celery_app
from workers.loop import LoopThread
from workers.transport import CeleryTransport

T = TypeVar("T")


class PayloadError(ValueError):
    """A message or result is malformed or too large."""


@dataclass
class Services:
    """Everything built on one Redis client."""

    redis: aioredis.Redis
    sessions: RedisSessionService
    artifacts: RedisArtifactService
    store: RedisInvocationStore
    queue: RedisSessionQueue
    registry: AppRegistry
    service: InvocationService
    events: RedisEventStream | None = None
    """The invocations' live event streams (the service publishes to them)."""
    wakeups: RedisWakeups | None = None
    """The wake stream pushes announce themselves on; orchestrators consume it."""
    consumer: WakeConsumer | None = None
    """This process's wake-up consumer, once :meth:`Runtime.start_orchestrating` ran."""


class Runtime:
    """A process's loop thread and services.

    ``run`` executes a coroutine on that loop; ``run_here`` on the calling thread's own loop
    (how workers run their jobs).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        load_apps: bool = True,
        celery_app: Celery | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self.celery_app = celery_app or default_celery_app
        if not self.settings.redis_url:
            raise RuntimeError(
                "ADK_CELERY_REDIS_URL is not set: orchestrators, workers and clients need Redis "
                "(the embedded mode runs in one process: see examples/demo.py)."
            )
        self._load_apps = load_apps
        self._loop = LoopThread()
        self._services: Services | None = None
        self._registry: AppRegistry | None = None
        self._registry_lock = threading.Lock()
        self._here = threading.local()
        self._thread_loops: list[tuple[asyncio.AbstractEventLoop, Services]] = []

    def run(self, coro: Any, timeout: float | None = None) -> Any:
        """Run a coroutine on this process's loop."""
        return self._loop.run(coro, timeout)

    def run_here(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the calling thread's own loop, with services of its own.

        For the worker pool's threads (or a prefork child, or the solo pool's main thread),
        for jobs whose tool is a plain sync function: the job then runs where Celery handed
        it over, instead of being passed to the shared loop thread and back, and the function
        runs inline, since the thread waits for this job anyway (see
        :func:`~orchestrator.tools.function_tool.sync_calls_inline`). Anything that may keep
        loop-bound clients (async tools, toolsets, models) belongs on the shared loop: ``run``.
        """
        loop = getattr(self._here, "loop", None)
        if loop is None:
            loop = self._here.loop = asyncio.new_event_loop()
        with sync_calls_inline():
            return loop.run_until_complete(coro)

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Start a coroutine on this process's loop; cancelling the future cancels it.

        Raises RuntimeError once the loop is stopped (the coroutine would never run).
        """
        if self._loop.loop.is_closed() or not self._loop._thread.is_alive():
            coro.close()
            raise RuntimeError("The runtime's loop is stopped.")
        return asyncio.run_coroutine_threadsafe(coro, self._loop.loop)

    @property
    def forked(self) -> bool:
        """True if this object was inherited across a fork (it must not be used)."""
        return self._loop.forked

    def close(self) -> None:
        """Close this runtime's Redis connections and stop its loop thread."""
        self.stop_orchestrating()
        if self._services is not None:
            self.run(self._services.redis.aclose())
            self._services = None
        self._loop.stop()
        for loop, services in self._thread_loops:  # idle: their threads run no job now
            if not loop.is_running() and not loop.is_closed():
                loop.run_until_complete(services.redis.aclose())
        self._thread_loops.clear()

    async def services(self) -> Services:
        """The services of the running loop, built on first use there.

        Redis connections belong to the loop that opened them: the shared loop thread has one
        set, and each thread that uses :meth:`run_here` has its own. The apps are loaded once.
        """
        loop = asyncio.get_running_loop()
        if loop is self._loop.loop:
            if self._services is None:
                self._services = self._build_services()
            return self._services
        cached: tuple[asyncio.AbstractEventLoop, Services] | None = getattr(self._here, "services", None)
        if cached is None or cached[0] is not loop:
            cached = self._here.services = (loop, self._build_services())
            self._thread_loops.append(cached)
        return cached[1]

    def apps(self) -> AppRegistry:
        """The apps this process serves, loaded once (from any thread)."""
        with self._registry_lock:
            if self._registry is None:
                specs = self.settings.app_specs()
                self._registry = AppRegistry.from_specs(specs) if self._load_apps else AppRegistry()
            return self._registry

    def _build_services(self) -> Services:
        settings = self.settings
        client = connect(settings.redis_url or "")
        registry = self.apps()
        sessions = RedisSessionService(client=client)
        artifacts = RedisArtifactService(client=client)
        store = RedisInvocationStore(client, record_ttl_seconds=settings.record_ttl_seconds)
        wakeups = RedisWakeups(client, keys.wake_stream(settings.invocations_queue))
        queue = RedisSessionQueue(client, lease_ttl_seconds=settings.lease_ttl_seconds,
                                  wakeups=wakeups, record_ttl_seconds=settings.record_ttl_seconds)
        events = RedisEventStream(client, ttl_seconds=settings.record_ttl_seconds)
        service = InvocationService(
            registry,
            session_service=sessions,
            store=store,
            queue=queue,
            transport=CeleryTransport(self.celery_app, settings, client),
            artifact_service=artifacts,
            lease_renew_seconds=settings.lease_ttl_seconds / 3,
            # Committed events reach the stream inside their append; the sink sends chunks.
            event_sink=events.publish_partial,
            run_context=events.committed_by_append,
        )
        return Services(client, sessions, artifacts, store, queue, registry, service,
                        events=events, wakeups=wakeups)

    def start_orchestrating(self) -> None:
        """Start draining the sessions announced on the wake stream, on this process's loop."""
        self.run(self._start_consumer())

    async def _start_consumer(self) -> None:
        services = await self.services()
        if services.consumer is not None or services.wakeups is None:
            return
        settings = self.settings
        services.consumer = services.wakeups.consumer(
            services.service.drain,
            concurrency=settings.orchestrator_concurrency,
            retry_seconds=settings.lease_retry_seconds,
            reclaim_idle_seconds=settings.lease_ttl_seconds,
        )
        await services.wakeups.ensure_group()
        services.consumer.start()

    def stop_orchestrating(self, timeout: float = 10.0) -> None:
        """Stop reading wake-ups; drains in progress get ``timeout`` seconds to finish."""
        if self._services is None or self._services.consumer is None:
            return
        consumer, self._services.consumer = self._services.consumer, None
        self.run(consumer.stop(timeout), timeout=timeout + 5)

    async def submit_invocation(
        self, kwargs: dict[str, Any]
    ) -> tuple[InvocationRecord | None, SessionKey | None]:
        """Validate an enqueue request, record it, and queue its start.

        Bad input never raises here: it becomes a failed invocation whose error says what was
        wrong (or, without an app/user to file it under, a ``(None, None)`` return).
        """
        services = await self.services()
        app_name, user_id = kwargs.get("app_name"), kwargs.get("user_id")
        if not isinstance(app_name, str) or not app_name or not isinstance(user_id, str) or not user_id:
            return None, None
        record = InvocationRecord(
            invocation_id=kwargs.get("invocation_id") or platform.new_invocation_id(),
            app_name=app_name,
            user_id=user_id,
            session_id=kwargs.get("session_id") or platform.new_uuid(),
        )
        try:
            message = parse_message(kwargs.get("new_message"))
            record.new_message = (
                message.model_dump(mode="json", exclude_none=True) if message else None
            )
            delta = kwargs.get("state_delta")
            if delta is not None and not isinstance(delta, dict):
                raise PayloadError("state_delta must be a JSON object.")
            record.state_delta = delta
            streaming = kwargs.get("streaming")
            if streaming is not None and not isinstance(streaming, bool):
                raise PayloadError("streaming must be true or false.")
            record.streaming = bool(streaming)
            check_size(
                {"new_message": record.new_message, "state_delta": delta},
                self.settings.max_payload_bytes, "the message",
            )
        except (PayloadError, ValueError) as error:
            record.status = InvocationStatus.FAILED
            record.error = f"{type(error).__name__}: {error}"
            await services.store.create(record)
            return record, None
        new_session = bool(kwargs.get("create_session") or not kwargs.get("session_id"))
        return await _record_and_queue(services, record, new_session), session_key(record)


async def _record_and_queue(
    services: Services, record: InvocationRecord, new_session: bool
) -> InvocationRecord:
    """Create the session (if asked and absent), record the invocation and queue its start.

    One transaction, so one round trip: the orchestrator woken by the start finds the
    session. A repeated enqueue (same invocation id) changes nothing and returns the record
    stored first.
    """
    start = WorkItem(kind="start", invocation_id=record.invocation_id)
    for _ in range(2):
        async with services.redis.pipeline(transaction=True) as pipe:
            if new_session:
                services.sessions.queue_create_if_absent(
                    pipe, record.app_name, record.user_id, record.session_id)
            services.queue.queue_create_and_push(pipe, record, start)
            replies = await pipe.execute(raise_on_error=False)
        if not any(isinstance(reply, NoScriptError) for reply in replies):
            break
        # Redis forgot the scripts (a restart): none of them ran; load them and go again.
        await services.sessions.load_scripts()
        await services.queue.load_scripts()
    if new_session:
        check_created_if_absent(replies[0])
    if isinstance(replies[-1], Exception):
        raise replies[-1]
    if replies[-1]:
        return record
    existing = await services.store.get(record.app_name, record.invocation_id)
    return existing or record


def parse_message(value: Any) -> types.Content | None:
    """A message as text or genai Content JSON; anything else is a PayloadError."""
    if value is None:
        return None
    if isinstance(value, str):
        return types.Content(role="user", parts=[types.Part(text=value)])
    if isinstance(value, dict):
        try:
            content = types.Content.model_validate(value)
        except Exception as error:
            raise PayloadError(f"new_message is not a valid Content: {error}") from None
        if not content.parts:
            raise PayloadError("new_message has no parts.")
        return content
    raise PayloadError(f"new_message must be text or a Content object, not {type(value).__name__}.")


def check_size(payload: Any, limit: int, what: str) -> None:
    """Raise PayloadError if ``payload`` is more than ``limit`` bytes of JSON."""
    size = len(json.dumps(payload, default=str).encode())
    if size > limit:
        raise PayloadError(
            f"{what} is {size} bytes of JSON, over the limit of {limit} bytes "
            "(ADK_CELERY_MAX_PAYLOAD_BYTES)."
        )


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> Runtime:
    """Return this process's Runtime (rebuilt after a fork: threads do not survive one)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None or _runtime.forked:
            _runtime = Runtime()
        return _runtime
