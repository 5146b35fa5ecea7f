"""The Celery application: plain JSON only, late acks, task events on, routes by task kind.

Task names are part of the public interface (any Celery client can ``send_task`` them with
JSON keyword arguments; see the README):

- ``adk_celery.invoke``   start an invocation (orchestrators)
- ``adk_celery.drain``    post a wake-up for a session, so an orchestrator drains it
- ``adk_celery.answer``   answer a pending function call from outside (orchestrators)
- ``adk_celery.cancel``   cancel an invocation (orchestrators)
- ``adk_celery.run_tool`` run one tool call (workers; sent by orchestrators)
- ``adk_celery.run_agent`` run one ParallelAgent branch (workers; sent by orchestrators)
"""

from __future__ import annotations

import logging
import socket
import sys
from functools import cached_property
from typing import Any

import kombu.exceptions
from celery import Celery, signals

from config import Settings, get_settings
from config.settings import describe_settings_error
from orchestrator.backends.redis.connection import is_unix_socket
from orchestrator.errors import register_infrastructure_errors
from workers import wire_json
from workers.broker import transport_path

logger = logging.getLogger(__name__)

TASK_INVOKE = "adk_celery.invoke"
TASK_DRAIN = "adk_celery.drain"
TASK_ANSWER = "adk_celery.answer"
TASK_CANCEL = "adk_celery.cancel"
TASK_RUN_TOOL = "adk_celery.run_tool"
TASK_RUN_AGENT = "adk_celery.run_agent"
ORCHESTRATOR_TASKS = (TASK_INVOKE, TASK_DRAIN, TASK_ANSWER, TASK_CANCEL)


REPR_LIMIT = 1024
"""Longest kwargs text a task message carries for Flower and the logs."""


def kwargs_repr(fields: dict[str, Any], limit: int = REPR_LIMIT) -> str:
    """The text Flower shows as a task's kwargs: the fields that identify the work.

    Passing it to ``send_task`` also spares Celery computing a safe repr of the whole payload
    (a tool job carries a state snapshot), which costs more than publishing the message.
    """
    text = repr({k: v for k, v in fields.items() if v is not None})
    return text if len(text) <= limit else text[: limit - 3] + "..."


def celery_url(redis_url: str) -> str:
    """``redis_url`` as Celery and kombu name it: a ``unix://`` socket is ``redis+socket://``."""
    return "redis+socket:" + redis_url.removeprefix("unix:") if is_unix_socket(redis_url) else redis_url


def _keepalive_options() -> dict[int, int]:
    """TCP keepalive for broker connections: probe after 30 s idle, every 5 s, 3 times.

    kombu turns keepalive on without options, which leaves the system's timers (two hours on
    Linux): a Redis host that vanished without closing its connections (a failover, a NAT
    or firewall timeout) would go unnoticed that long. Options the platform lacks are left out.
    """
    wanted = {"TCP_KEEPIDLE": 30, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3}
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


wire_json.register()  # before any app of this process sends or reads a task message
# The broker's connection errors are ours, never a tool's or an invocation's outcome
# (registered here, where every process that sends or runs a task gets its Celery app).
register_infrastructure_errors(kombu.exceptions.OperationalError)

RESULT_RETRIES = 10
"""Times the result backend retries an operation that met a connection error (see below)."""


class _Celery(Celery):  # type: ignore[misc]
    adk_settings: Settings
    """The settings this app was built from: what every part of its processes reads."""
    @cached_property
    def Worker(self) -> Any:
        """Celery's worker whose banner says what an orchestrator runs at once (workers.banner)."""
        return self.subclass_with_self("workers.banner:Worker")


def create_celery_app(settings: Settings | None = None) -> Celery:
    """Build the Celery app from settings (broker and result backend: the Redis URL)."""
    settings = settings or get_settings()
    url = celery_url(settings.redis_url) if settings.redis_url else "memory://"
    app = _Celery("adk_celery", broker=url, backend=url if settings.redis_url else None)
    app.adk_settings = settings
    if url.startswith("redis://"):  # TLS, sockets and Sentinel keep kombu's own transport
        app.conf.broker_transport = transport_path(settings.broker_client_reuse)
    transport_options: dict[str, Any] = {
        # Reconnecting after a lost connection is Celery's (it retries until Redis is back,
        # see broker_connection_max_retries); these make a dead connection show up as an
        # error rather than a hang: a bounded connect, and keepalive probes on idle sockets.
        "socket_connect_timeout": 5,
        "visibility_timeout": settings.visibility_timeout_seconds,
    }
    tcp = not is_unix_socket(settings.redis_url or "")  # a local socket takes no TCP options
    if tcp:
        transport_options.update(socket_keepalive=True, socket_keepalive_options=_keepalive_options())
    transport_options.update(settings.broker_transport_options)
    routes = {name: {"queue": settings.invocations_queue} for name in ORCHESTRATOR_TASKS}
    routes[TASK_RUN_TOOL] = {"queue": settings.tools_queue}
    routes[TASK_RUN_AGENT] = {"queue": settings.agents_queue or settings.tools_queue}
    app.conf.update(
        # Our task messages are sent in plain JSON that nothing decodes into objects
        # (workers/wire_json.py): each send names that serializer (workers/transport.py,
        # workers/client.py). The default stays stock "json", which Celery's remote control
        # replies use too: a stock Celery or Flower (`celery --broker=... inspect ping`)
        # reads them. Stock "json" task messages from other services are accepted
        # (workers/consumer.py refuses one holding a value kombu's decoder would change).
        task_serializer="json",
        result_serializer="json",
        event_serializer="json",
        accept_content=[wire_json.CONTENT_TYPE, "application/json"],
        result_accept_content=["json"],
        # Refused messages are answered and logged without their bodies (workers/consumer.py).
        worker_consumer="workers.consumer:Consumer",
        task_acks_late=True,
        task_reject_on_worker_lost=False,
        worker_prefetch_multiplier=1,
        task_send_sent_event=True,
        worker_send_task_events=True,
        # Invocation status lives in our own records; Flower follows task events.
        task_track_started=False,
        # A task's result is for its sender (the invoke task's ids), read at once: kept an
        # hour, without the task's arguments (a message's text stays out of the backend).
        result_extended=False,
        result_expires=settings.task_result_ttl_seconds,
        broker_transport_options=transport_options,
        result_backend_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        # A worker or orchestrator whose broker connection is lost (a Redis restart) waits
        # for Redis and reconnects however long it takes; Celery gives up after 100 attempts
        # (about 50 minutes) by default and the process exits.
        broker_connection_retry=True,
        broker_connection_max_retries=None,
        # A job still running when the connection is lost goes on: its result is stored in
        # Redis once it is back (the project's clients retry) and the invocation resumes.
        # Its message goes back to the queue when the old channel closes, or at the
        # visibility-timeout sweep; a second delivery finds the call answered and is skipped.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        # The result backend (task states for Flower, PROGRESS) has its own Redis pool: the
        # same keepalive, a health check of idle connections, and a bounded retry with
        # exponential backoff (from 0.2 s doubling to 1 s, full jitter: about 4 s in all, at
        # most 8.4 s) of an operation that meets a connection error, instead of failing the
        # job's bookkeeping.
        redis_socket_keepalive=tcp,
        redis_socket_connect_timeout=5,
        redis_backend_health_check_interval=10,
        result_backend_always_retry=True,
        result_backend_max_retries=RESULT_RETRIES,
        result_backend_base_sleep_between_retries_ms=100,
        result_backend_max_sleep_between_retries_ms=1000,
        task_default_queue=settings.invocations_queue,
        task_routes=routes,
        worker_hijack_root_logger=False,
    )
    return app


def _import_settings() -> tuple[Settings, ValueError | None]:
    """The environment's settings; the defaults and the error if they are malformed.

    Importing ``workers`` does not fail on a malformed setting: ``adk-celery`` reads the
    settings again and says in one line which is wrong, as ``Client()`` raises it, and a
    worker started by ``celery -A workers`` stops at its start (:func:`_malformed_settings`).
    """
    try:
        return get_settings(), None
    except ValueError as error:  # pydantic's ValidationError, pydantic-settings' SettingsError
        return Settings.model_construct(), error


# The entry point of ``celery -A workers ...``: Celery imports this module and finds the app,
# so its settings are read here, from the environment. ``adk-celery`` (workers/cli.py) then
# gives it the settings with its command-line options (:func:`use_settings`).
_settings, _settings_error = _import_settings()
app = create_celery_app(_settings)

# Stock `celery -A workers flower` would serve Flower with none of `adk-celery flower`'s
# lockdown (login, control routes, redaction): it stops here, saying what to run instead.
if "flower" in sys.argv:
    from workers.flower import refuse_stock_flower

    refuse_stock_flower()


@signals.worker_init.connect
def _malformed_settings(**_: Any) -> None:
    """Stop a worker whose settings are malformed, saying which (no broker is configured)."""
    if _settings_error is not None:
        sys.exit(f"adk-celery: error: {describe_settings_error(_settings_error)}")


@signals.worker_init.connect
def _read_only_control(**_: Any) -> None:
    """Keep only the remote-control commands that read (see :mod:`workers.control_lockdown`)."""
    from workers.control_lockdown import lock_down

    dropped = lock_down(app_settings().flower_allow_control)
    logger.debug("Remote control: commands refused here: %s", ", ".join(dropped))


def use_settings(settings: Settings) -> None:
    """Run this process's Celery app with ``settings`` (an entry point's, before it starts).

    Only settings that Celery's own configuration does not hold may differ from those the
    app was built with (the apps served, the metrics port): they are read from the app's
    ``adk_settings`` wherever they are used, in this process and in the ones it forks.
    """
    app.adk_settings = settings


def app_settings() -> Settings:
    """The settings of this process's Celery app."""
    return app.adk_settings
