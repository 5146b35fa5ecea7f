"""The services one orchestrator or worker process uses, built lazily on each event loop it runs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import redis.asyncio as aioredis

from config import Settings
from config.settings import NO_REDIS_URL
from orchestrator import failpoints
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.artifact_service import RedisArtifactService
from orchestrator.backends.redis.connection import connect
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.session_queue import RedisSessionQueue
from orchestrator.backends.redis.session_service import LeasedSessionWriter, RedisSessionService
from orchestrator.backends.redis.streams import RedisEventStream
from orchestrator.backends.redis.wake_consumer import WakeConsumer
from orchestrator.backends.redis.wakeups import RedisWakeups
from orchestrator.distributed.intake import Limits
from orchestrator.distributed.models import InvocationRecord
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.stores import SessionKey
from orchestrator.errors import register_infrastructure_errors
from orchestrator.process_setup import configure_core
from workers.enqueue import SendTransaction, submit_invocation
from workers.heartbeat import Heartbeats
from workers.keep_alive import UnfinishedKeeper
from workers.loop import LoopThread, LoopThreadDeadError

if TYPE_CHECKING:  # Celery, the ADK core's runner and the job machinery: orchestrators' and workers' only
    from celery import Celery

    from orchestrator.distributed.service import InvocationService
    from workers.transport import CeleryTransport
    from workers.watchdog import JobWatchdog

T = TypeVar("T")
logger = logging.getLogger(__name__)

# The loop's death is ours, never a tool's or an invocation's outcome (the broker's
# connection errors are registered with the Celery app, see workers.celery_app).
register_infrastructure_errors(LoopThreadDeadError)


@dataclass
class Services:
    """Everything built on one Redis client.

    The :class:`InvocationService` (a Runner per app) is built on first use of
    :attr:`service`: orchestrators and clients use it; a worker running jobs never does (it
    hands results back with :func:`~orchestrator.distributed.executor.deliver_result`).
    """

    redis: aioredis.Redis
    sessions: RedisSessionService
    artifacts: RedisArtifactService
    store: RedisInvocationStore
    queue: RedisSessionQueue
    registry: AppRegistry
    build_service: Callable[[], InvocationService]
    events: RedisEventStream | None = None
    """The invocations' live event streams (the service publishes to them)."""
    wakeups: RedisWakeups | None = None
    """The wake stream pushes announce themselves on; orchestrators consume it."""
    consumer: WakeConsumer | None = None
    """This process's wake-up consumer, once :meth:`Runtime.start_orchestrating` ran."""
    build_transport: Callable[[], CeleryTransport] | None = None
    """Builds :attr:`transport` (on first use: a client's Celery app is built only if it sends)."""
    watchdog: JobWatchdog | None = None
    """This process's job watchdog, once :meth:`Runtime.start_orchestrating` ran."""
    keeper: UnfinishedKeeper | None = None
    """This process's keeper of unfinished invocations, once :meth:`Runtime.start_orchestrating` ran."""

    @cached_property
    def service(self) -> InvocationService:
        """The invocation service on these clients (built on first use)."""
        return self.build_service()

    @cached_property
    def transport(self) -> CeleryTransport | None:
        """Where the service's remote jobs go (built on first use)."""
        return self.build_transport() if self.build_transport is not None else None


class Runtime:
    """A process's loop thread and services.

    ``run`` executes a coroutine on that loop (every job of a worker runs there).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        load_apps: bool = True,
        celery_app: Celery | None = None,
        celery_factory: Callable[[], Celery] | None = None,
    ) -> None:
        """``celery_app`` (or ``celery_factory``, asked on first need): what jobs go out with.

        Neither: the process's app (:data:`workers.celery_app.app`), imported on first need.
        """
        self.settings = settings
        self._celery_app = celery_app
        self._celery_factory = celery_factory
        if not self.settings.redis_url:
            raise RuntimeError(NO_REDIS_URL)
        failpoints.arm(self.settings.failpoints)  # fault tests only; empty otherwise
        configure_core(self.settings)  # the ADK core's defaults: this process's settings
        self.limits = Limits.from_settings(self.settings)
        """What clients' requests are checked against."""
        self._load_apps = load_apps
        self._loop = LoopThread(use_uvloop=self.settings.uvloop)
        self._services: Services | None = None
        self._registry: AppRegistry | None = None
        self._registry_lock = threading.Lock()
        self._other_loops: dict[asyncio.AbstractEventLoop, Services] = {}
        self.heartbeats = Heartbeats(
            self.settings.redis_url, keys.job_watch(self.settings.invocations_queue),
            self.settings.job_heartbeat_seconds, _worker_id,
        )
        """Signs of life of the jobs this process runs (a worker's)."""

    @property
    def celery_app(self) -> Celery:
        """The Celery app jobs go out with: built or imported on first use (a client may send none)."""
        if self._celery_app is None:
            if self._celery_factory is not None:
                self._celery_app = self._celery_factory()
            else:
                from workers.celery_app import app  # Celery: imported by processes that send only

                self._celery_app = app
        return self._celery_app

    def run(self, coro: Any, timeout: float | None = None) -> Any:
        """Run a coroutine on this process's loop."""
        return self._loop.run(coro, timeout)

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
        for loop, services in self._other_loops.items():  # the API server's, once it stopped
            if not loop.is_running() and not loop.is_closed():
                loop.run_until_complete(services.redis.aclose())
        self._other_loops.clear()

    def close_plugins(self, timeout: float = 10.0) -> None:
        """Close the plugins of the apps this process loaded (at shutdown); failures are logged.

        Each process has its own plugin objects (it imported the apps): each closes its own.
        """
        with self._registry_lock:
            registry = self._registry
        apps = [app for app in registry or () if app.plugins]
        if not apps or self._loop.loop.is_closed() or not self._loop._thread.is_alive():
            return

        async def close_all() -> None:
            from orchestrator.plugins import PluginManager  # the ADK core's plugins: apps loaded only

            for app in apps:
                try:
                    await PluginManager(app.plugins).close()
                except Exception:  # one app's plugins must not keep the others open
                    logger.exception("Closing the plugins of app %r failed", app.name)

        try:
            self.run(close_all(), timeout)
        except Exception:  # shutting down anyway
            logger.exception("Closing plugins did not finish")

    async def services(self) -> Services:
        """The services of the running loop, built on first use there; the apps loaded once.

        Redis connections belong to the loop that opened them: this process's loop thread
        has one set, and another loop (the API server's) its own.
        """
        loop = asyncio.get_running_loop()
        if loop is self._loop.loop:
            if self._services is None:
                self._services = self._build_services()
            return self._services
        services = self._other_loops.get(loop)
        if services is None:
            services = self._other_loops[loop] = self._build_services()
        return services

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
        sessions = RedisSessionService(
            client=client, wake_stream=keys.wake_stream(settings.invocations_queue))
        artifacts = RedisArtifactService(client=client)
        watch = keys.job_watch(settings.invocations_queue)
        store = RedisInvocationStore(client, record_ttl_seconds=settings.record_ttl_seconds,
                                     job_watch_key=watch)
        wakeups = RedisWakeups(client, keys.wake_stream(settings.invocations_queue))
        queue = RedisSessionQueue(client, lease_ttl_seconds=settings.lease_ttl_seconds,
                                  wakeups=wakeups, record_ttl_seconds=settings.record_ttl_seconds,
                                  job_watch_key=watch)
        events = RedisEventStream(client, ttl_seconds=settings.record_ttl_seconds)

        def transport() -> CeleryTransport:
            from workers.transport import CeleryTransport  # Celery: for a process that sends jobs

            return CeleryTransport(self.celery_app, settings, client)

        def service() -> InvocationService:
            # The ADK core's runner: built by orchestrators and the API server, not by clients.
            from orchestrator.distributed.service import InvocationService

            return InvocationService(
                registry,
                session_service=sessions,
                store=store,
                queue=queue,
                transport=services.transport,
                artifact_service=artifacts,
                lease_renew_seconds=settings.lease_ttl_seconds / 3,
                # Committed events reach the stream inside their append; the sink sends chunks.
                event_sink=events.publish_partial,
                abandoned_chunks=events.abandoned_chunks,
                writer_for=lambda key, token, record: _leased_writer(
                    sessions, events, key, token, record),
                limits=self.limits,
                session_cache_max_bytes=settings.session_cache_max_bytes,
            )
        services = Services(client, sessions, artifacts, store, queue, registry, service,
                            events=events, wakeups=wakeups, build_transport=transport)
        return services

    def start_orchestrating(self, hostname: str | None = None) -> None:
        """Start draining the sessions announced on the wake stream, on this process's loop.

        ``hostname``: this process's Celery node name (what its job watchdog tells Flower
        under).
        """
        self.run(self._start_consumer(hostname))

    async def _start_consumer(self, hostname: str | None) -> None:
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
        if services.transport is not None:
            try:
                await asyncio.to_thread(services.transport.warm_up)
            except Exception as error:  # the first publish to each queue declares it then
                logger.warning("Declaring the tool queues at start-up failed (%s: %s); each is "
                               "declared by its first job instead", type(error).__name__, error)
        services.consumer.start()
        if services.transport is not None:
            from workers.watchdog import JobWatchdog  # the job machinery: orchestrators' only

            services.watchdog = JobWatchdog(services, services.transport, settings, hostname)
            services.watchdog.start()
        services.keeper = UnfinishedKeeper(services.redis, settings.record_ttl_seconds)
        services.keeper.start()

    def stop_orchestrating(self, timeout: float = 10.0) -> None:
        """Stop reading wake-ups; drains in progress get ``timeout`` seconds to finish."""
        if self._services is None or self._services.consumer is None:
            return
        consumer, self._services.consumer = self._services.consumer, None
        watchdog, self._services.watchdog = self._services.watchdog, None
        if watchdog is not None:
            self.run(watchdog.stop(), timeout=5)
        keeper, self._services.keeper = self._services.keeper, None
        if keeper is not None:
            self.run(keeper.stop(), timeout=5)
        self.run(consumer.stop(timeout), timeout=timeout + 5)

    async def submit_invocation(
        self, kwargs: dict[str, Any], *, session_must_exist: bool = False,
        send: SendTransaction | None = None, store_refused: bool = True,
    ) -> tuple[InvocationRecord, SessionKey | None]:
        """Check an enqueue request, record it, and queue its start, on this process's services.

        See :func:`workers.enqueue.submit_invocation`.
        """
        return await submit_invocation(await self.services(), self.limits, kwargs,
                                       session_must_exist=session_must_exist, send=send,
                                       store_refused=store_refused)


def _leased_writer(
    sessions: RedisSessionService, events: RedisEventStream, key: SessionKey, token: str,
    record: InvocationRecord,
) -> tuple[LeasedSessionWriter, Callable[[InvocationRecord], None]]:
    """The writer of one piece of work on ``record``, and how to save it with a commit.

    The writer's appends are fenced by the session's lease and mirrored to the invocation's
    live stream.
    """
    mirror = events.mirror_for(record)
    return sessions.leased_writer(keys.session_lease(*key), token, mirror), events.saver(mirror)


def _worker_id() -> str:
    """The process's name in the job journal (see :func:`~orchestrator.distributed.executor.worker_id`)."""
    from orchestrator.distributed.executor import worker_id  # the ADK core's job runner: workers'

    return worker_id()


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> Runtime:
    """Return this process's Runtime (rebuilt after a fork: threads do not survive one)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None or _runtime.forked:
            from workers.celery_app import app_settings  # the process's Celery app's settings

            _runtime = Runtime(app_settings())
        return _runtime
