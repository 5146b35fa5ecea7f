"""``adk-celery flower``: Flower, locked down for a cluster that runs other people's data.

Stock Flower answers ``/metrics`` and ``/healthcheck`` without authentication, lets any
logged-in user shut workers down or send any task (``/api/task/async-apply/...``), and shows
task arguments as their senders wrote them (an invocation's message text, with whatever
personal data it holds). As shipped here:

- every route but the static files and the login pages needs the configured login
  (``ADK_CELERY_FLOWER_BASIC_AUTH``, one ``user:password`` given to Flower as one login, or
  Flower's own ``--auth`` / ``FLOWER_AUTH``); with no login configured Flower only starts on
  a loopback address, and says so;
- the routes that run tasks or control workers answer 403 unless
  ``ADK_CELERY_FLOWER_ALLOW_CONTROL`` is set (the worker pages' buttons then say why);
- task arguments are redacted before Flower keeps them (``ADK_CELERY_FLOWER_TASK_ARGUMENTS``),
  in task events and in the workers' replies to ``inspect active/reserved/scheduled`` (a
  worker's page, ``/api/workers``): identifiers stay readable, message text and state do not.

Stock ``celery -A workers flower`` has none of this: :func:`refuse_stock_flower` stops it when
the app module calls it as it is imported.

Flower's own command line is kept: options after ``adk-celery flower`` go to Flower, written
``--name=value``; one Flower does not know, or a malformed value, is refused before anything
starts (:class:`FlowerOptionError`: a mistyped login option must not leave Flower open). The
launcher uses Flower 2's documented building blocks (its ``Flower`` application, ``Events``
and option parsing); ``pyproject.toml`` pins Flower below 3.
"""

from __future__ import annotations

import ast
import logging
import signal
import sys
from typing import Any

import tornado.options
import tornado.web
from celery import Celery
from flower import command as flower_command
from flower.app import Flower
from flower.events import Events
from flower.inspector import Inspector
from flower.options import options as flower_options
from flower.urls import settings as flower_settings
from flower.views import BaseHandler
from flower.views.monitor import Healthcheck, Metrics

from config import Settings
from workers.addresses import is_loopback

logger = logging.getLogger(__name__)

CONTROL_ROUTES = (
    r"/api/worker/shutdown/(.+)", r"/api/worker/pool/restart/(.+)", r"/api/worker/pool/grow/(.+)",
    r"/api/worker/pool/shrink/(.+)", r"/api/worker/pool/autoscale/(.+)",
    r"/api/worker/queue/add-consumer/(.+)", r"/api/worker/queue/cancel-consumer/(.+)",
    r"/api/task/apply/(.+)", r"/api/task/async-apply/(.+)", r"/api/task/send-task/(.+)",
    r"/api/task/abort/(.+)", r"/api/task/timeout/(.+)", r"/api/task/rate-limit/(.+)",
    r"/api/task/revoke/(.+)",
)
"""Flower's routes that run tasks or change workers (off unless allowed)."""

SHOWN_FIELDS = frozenset({"app_name", "user_id", "session_id", "invocation_id",
                          "function_call_id", "tool_name", "agent_name", "parallel_agent",
                          "branch", "attempt", "queue", "streaming", "create_session"})
"""Task keyword arguments shown as they are when arguments are redacted: who and what."""

_PARSE_LIMIT = 8192
"""Longest argument text parsed to redact it field by field (longer: redacted whole)."""


class FlowerOptionError(ValueError):
    """An argument of ``adk-celery flower`` that is not one of Flower's options, or is malformed.

    Its message names the option, never a value (a login, a secret).
    """


def check_flower_options(extra: list[str]) -> None:
    """Raise :class:`FlowerOptionError` unless each argument is ``--name[=value]`` of Flower's."""
    names = [arg.lstrip("-").partition("=")[0] for arg in extra]
    if not all(arg.startswith("-") and name for arg, name in zip(extra, names, strict=True)):
        raise FlowerOptionError("Flower's options are written --name=value: an argument without "
                                "a leading - (a value after a space?) is not one")
    if unknown := [f"--{name}" for name in names if not hasattr(flower_options, name.replace("-", "_"))]:
        raise FlowerOptionError(f"unrecognized Flower options: {' '.join(unknown)}")
    for arg, name in zip(extra, names, strict=True):
        try:  # as Flower will parse it (again, after its environment variables)
            flower_options.parse_command_line(["flower", arg], final=False)
        except tornado.options.Error as error:  # "Option 'basic-auth' requires a value"
            raise FlowerOptionError(str(error)) from None
        except ValueError as error:  # a number's value: tornado calls int(value)
            raise FlowerOptionError(f"--{name}: {error}") from None


def check_flower_logins(logins: list[str] | None) -> None:
    """Raise :class:`FlowerOptionError` unless each of Flower's own logins is ``user:password``.

    Flower's ``--basic-auth`` / ``FLOWER_BASIC_AUTH`` (split on commas: several logins) lets
    in any entry as a whole: one without a colon or with an empty part would open Flower to a
    request sending just that text. Which entry is wrong is said by its position only.
    """
    for position, login in enumerate(logins or (), start=1):
        user, _, password = login.partition(":")
        if not (user and password):
            raise FlowerOptionError(
                f"--basic-auth / FLOWER_BASIC_AUTH: login {position} of {len(logins or ())} is "
                "not user:password with a non-empty user name and password")


class _Authenticated(BaseHandler):  # type: ignore[misc]
    """Refuses a request without the configured login, before any handler method runs."""

    def prepare(self) -> None:
        if not self.get_current_user():
            raise tornado.web.HTTPError(401)


class AuthenticatedMetrics(_Authenticated, Metrics):  # type: ignore[misc]
    """Flower's Prometheus metrics, behind the login."""


class AuthenticatedHealthcheck(_Authenticated, Healthcheck):  # type: ignore[misc]
    """Flower's health check, behind the login."""


class ControlDisabled(_Authenticated):
    """What a task-running or worker-control route answers when control is off."""

    def _refuse(self, *_: Any) -> None:
        self.set_status(403)
        self.set_header("Content-Type", "text/plain; charset=UTF-8")
        self.finish("Running tasks and controlling workers from Flower is turned off "
                    "(ADK_CELERY_FLOWER_ALLOW_CONTROL).")

    get = post = put = delete = _refuse

    def check_xsrf_cookie(self) -> None:
        """The refusal needs no XSRF token (it changes nothing)."""


def redact_arguments(text: Any, mode: str) -> Any:
    """The task arguments Flower may keep, from a task event's ``args``/``kwargs`` text.

    ``full``: as sent; ``truncated``: each string value cut to 40 characters; ``redacted``:
    identifiers (:data:`SHOWN_FIELDS`) kept, every other value replaced by its type and size.
    Text that is not a plain literal (or too long to parse) is replaced whole.
    """
    if mode == "full" or not isinstance(text, str) or text in ("", "()", "{}", "[]"):
        return text
    try:
        value = ast.literal_eval(text) if len(text) <= _PARSE_LIMIT else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = None
    if value is None:
        return f"<{len(text)} characters redacted>"
    return repr(_redact(value, mode))


def _redact(value: Any, mode: str, key: str | None = None) -> Any:
    if isinstance(value, dict):
        return {k: _redact(v, mode, k if isinstance(k, str) else None) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact(v, mode) for v in value]
    if mode == "truncated":
        return value[:40] + "..." if isinstance(value, str) and len(value) > 40 else value
    if key in SHOWN_FIELDS and isinstance(value, str | int | bool) and len(str(value)) <= 128:
        return value
    size = f", {len(value)} characters" if isinstance(value, str) else ""
    return f"<{type(value).__name__}{size} redacted>"


class RedactingEvents(Events):  # type: ignore[misc]
    """Flower's event receiver; task arguments are redacted before Flower stores them."""

    mode = "redacted"

    def on_event(self, event: dict[str, Any]) -> None:
        """Redact ``args`` and ``kwargs`` of a task event, then hand it to Flower."""
        if self.mode != "full" and str(event.get("type", "")).startswith("task-"):
            for field in ("args", "kwargs"):
                if field in event:
                    event[field] = redact_arguments(event[field], self.mode)
        super().on_event(event)


INSPECTED_TASK_LISTS = frozenset({"active", "reserved", "scheduled"})
"""Worker inspect replies that list tasks with their arguments (``scheduled``: under ``request``)."""


def redact_inspected(method: str, reply: Any, mode: str) -> Any:
    """A worker's reply to ``inspect <method>`` as Flower may keep it: task arguments redacted.

    ``active`` lists each running task's ``args``/``kwargs`` as the text its sender wrote
    (argsrepr/kwargsrepr); ``reserved`` and ``scheduled`` as the values themselves (a tool
    job's arguments and state snapshot). Both are redacted as :func:`redact_arguments` does.
    """
    if mode == "full" or method not in INSPECTED_TASK_LISTS or not isinstance(reply, list):
        return reply
    return [_redact_request(item, mode) for item in reply]


def _redact_request(item: Any, mode: str) -> Any:
    if not isinstance(item, dict):
        return item
    item = dict(item)
    if "request" in item:  # a scheduled task: {"eta", "priority", "request": {...}}
        item["request"] = _redact_request(item["request"], mode)
    for field in ("args", "kwargs"):
        value = item.get(field)
        if isinstance(value, str):
            item[field] = redact_arguments(value, mode)
        elif value is not None:
            try:
                item[field] = _redact(value, mode)
            except RecursionError:
                item[field] = f"<{type(value).__name__} redacted>"
    return item


class RedactingInspector(Inspector):  # type: ignore[misc]
    """Flower's worker inspector; task arguments in the replies are redacted before it keeps them.

    Flower shows what it keeps on a worker's page and at ``/api/workers``.
    """

    def __init__(self, *args: Any, mode: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mode = mode

    def _on_update(self, workername: str, method: str, response: Any) -> None:
        super()._on_update(workername, method, redact_inspected(method, response, self.mode))


class LockedFlower(Flower):  # type: ignore[misc]
    """Flower with its metrics and health check behind the login, and control optional."""

    def __init__(self, *, allow_control: bool, task_arguments: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        RedactingEvents.mode = task_arguments
        # Flower stores each inspect reply through Inspector._on_update (Flower 2); if that
        # ever changed, the replies would be kept unredacted: refuse to start instead.
        if not callable(getattr(Inspector, "_on_update", None)):
            raise RuntimeError("this Flower keeps worker inspect replies where adk-celery "
                               "cannot redact them (flower.inspector.Inspector._on_update)")
        self.inspector = RedactingInspector(self.io_loop, self.capp,
                                            self.options.inspect_timeout / 1000.0,
                                            mode=task_arguments)
        overrides: list[Any] = [(r"/metrics", AuthenticatedMetrics),
                                (r"/healthcheck", AuthenticatedHealthcheck)]
        if not allow_control:
            overrides += [(route, ControlDisabled) for route in CONTROL_ROUTES]
        # Added host rules are matched before Flower's own routes (tornado's add_handlers).
        self.add_handlers(r".*", overrides)


STOCK_FLOWER_REFUSED = (
    "celery -A workers flower: refused, as it would serve Flower without adk-celery's "
    "lockdown (no login on /metrics and /healthcheck, task control on, task arguments "
    "shown): run `adk-celery flower` (the same Flower options, written --name=value)")


def refuse_stock_flower() -> None:
    """Stop the process if it is stock Flower's ``celery -A workers flower`` starting.

    For the module Celery imports for ``celery -A workers`` (workers/celery_app.py), as it is
    imported: Celery loads the app from its command group before it runs the subcommand, so
    click's current context says which subcommand that is. ``adk-celery flower`` (not click)
    and ``celery -A workers worker`` are left alone.
    """
    import click

    context = click.get_current_context(silent=True)
    if (context is not None and context.invoked_subcommand == "flower"
            and context.find_root().command.name == "celery"):
        sys.exit(STOCK_FLOWER_REFUSED)


def run_flower(capp: Celery, settings: Settings, port: int, address: str, extra: list[str]) -> None:
    """Start the locked-down Flower on ``address:port`` (``extra``: Flower's own options)."""
    check_flower_options(extra)
    argv = [f"--port={port}", f"--address={address}", *extra]
    flower_command.apply_env_options()
    flower_command.apply_options("flower", argv)
    if settings.flower_basic_auth is not None:
        # Set as the one login it is: on Flower's command line (or in FLOWER_BASIC_AUTH) the
        # value would be split on commas into several, each a login of its own. Flower
        # compares the whole "user:password" a browser sends, so the password may hold
        # colons. It replaces any login given to Flower directly.
        flower_options.basic_auth = [settings.flower_basic_auth.get_secret_value()]
    else:
        check_flower_logins(flower_options.basic_auth)
    flower_command.extract_settings()
    flower_command.setup_logging()
    if not (flower_options.basic_auth or flower_options.auth):
        if not is_loopback(flower_options.address):
            # A missing setting: one line and status 2, as the API's refusal.
            print(f"adk-celery: error: no login configured (ADK_CELERY_FLOWER_BASIC_AUTH); "
                  f"refusing to serve on {flower_options.address!r}, which is not loopback.",
                  file=sys.stderr)
            sys.exit(2)
        logger.warning("Flower has no login configured: serving on %s only (loopback).",
                       flower_options.address)
    app = LockedFlower(
        capp=capp, options=flower_options, allow_control=settings.flower_allow_control,
        task_arguments=settings.flower_task_arguments,
        events=_events(capp), **flower_settings,
    )
    signal.signal(signal.SIGTERM, _stop_once)
    try:
        bound = app.start_http_server()
    except OSError as error:  # the port is taken, or the address is not this host's
        sys.exit(f"adk-celery flower: error: cannot listen on {flower_options.address}:"
                 f"{flower_options.port}: {error.strerror or error}")
    logger.info("Flower on http://%s:%s (control %s, task arguments %s)", flower_options.address,
                bound, "on" if settings.flower_allow_control else "off",
                settings.flower_task_arguments)
    try:
        app.start()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        app.stop()


def _events(capp: Celery) -> RedactingEvents:
    """Flower's event receiver, built as Flower builds it, redacting."""
    from tornado import ioloop

    return RedactingEvents(
        capp, db=flower_options.db, persistent=flower_options.persistent,
        state_save_interval=flower_options.state_save_interval,
        enable_events=flower_options.enable_events, io_loop=ioloop.IOLoop.instance(),
        max_workers_in_memory=flower_options.max_workers,
        max_tasks_in_memory=flower_options.max_tasks,
    )


def _stop_once(*_: Any) -> None:
    """Exit on SIGTERM, once.

    A second SIGTERM while exiting (``timeout`` sends one to the process, then one to its
    group) is ignored rather than raised in the middle of the shutdown.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(0)
