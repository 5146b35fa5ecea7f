"""How a :class:`~workers.client.Client` starts invocations.

The ``adk_celery.invoke`` arguments of an enqueue, the check of a request's app against the
client's apps, the enqueue transaction on a synchronous connection in the caller's thread,
and the ``adk_celery.invoke`` task sent instead with ``enqueue_via_celery``.
"""

from __future__ import annotations

from typing import Any

import redis
from celery import Celery
from google.genai import types

from config import Settings
from orchestrator import platform
from orchestrator.distributed.intake import preview
from orchestrator.distributed.models import InvocationRecord
from orchestrator.distributed.registry import AppRegistry
from orchestrator.errors import AppConfigError, RequestError, SessionNotFoundError
from workers import wire_json
from workers.celery_app import TASK_INVOKE, kwargs_repr
from workers.enqueue import enqueue_scripts, queue_invocation, scripts_missing, was_queued

_SHOWN_FIELDS = ("app_name", "user_id", "session_id", "invocation_id")
"""The fields of an ``adk_celery.invoke`` task Flower and the logs show: identifiers only."""


def invoke_kwargs(
    app_name: str, user_id: str, message: str | types.Content | None, *,
    session_id: str | None, state_delta: dict[str, Any] | None, invocation_id: str | None,
    streaming: bool, custom_metadata: dict[str, Any] | None,
) -> dict[str, Any]:
    """An enqueue's arguments as the ``adk_celery.invoke`` task takes them, new ids filled in.

    RequestError for an empty ``session_id`` or ``invocation_id``; nothing else is checked.
    """
    for field, value in (("session_id", session_id), ("invocation_id", invocation_id)):
        if isinstance(value, str) and not value:
            raise RequestError(field, "must not be empty (leave it out, None, for a new one).")
    invocation_id = invocation_id or platform.new_invocation_id()
    if isinstance(message, types.Content):
        payload: Any = message.model_dump(mode="json", exclude_none=True)
    else:
        payload = message
    kwargs: dict[str, Any] = {
        "app_name": app_name, "user_id": user_id,
        "session_id": session_id or platform.new_uuid(),
        "create_session": session_id is None,
        "new_message": payload, "state_delta": state_delta,
        "invocation_id": invocation_id,
    }
    if streaming:
        kwargs["streaming"] = True
    if custom_metadata is not None:
        kwargs["custom_metadata"] = custom_metadata
    return kwargs


class AppCheck:
    """The check of a request's app against the apps a client knows (``Settings.apps``)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._apps: list[str] | None = None

    def __call__(self, app_name: str) -> None:
        """RequestError if the client knows its apps (``Settings.apps``) and not this one.

        The apps are loaded once, at the first need: AppConfigError if they cannot be. A
        client configured without apps checks nothing (an orchestrator fails the invocation
        of an app it does not serve).
        """
        specs = self._settings.app_specs()
        if not specs:
            return
        if self._apps is None:
            try:
                self._apps = AppRegistry.from_specs(specs).names
            except (ValueError, TypeError) as error:
                raise AppConfigError(
                    f"ADK_CELERY_APPS (Settings.apps): {error} A client that names apps loads "
                    "them to check the app of each request; leave it empty not to.") from None
        if app_name not in self._apps:
            raise RequestError("app_name", f"{preview(app_name)} is not an app of this client "
                                           f"(ADK_CELERY_APPS: {', '.join(self._apps)}).")


def record_and_queue(redis_client: redis.Redis, services: Any, record: InvocationRecord,
                     new_session: bool, *, session_must_exist: bool = False) -> bool:
    """The enqueue transaction, on a synchronous connection in the caller's thread.

    False for a repeated invocation id (nothing changed). Raises what a script refused,
    and SessionNotFoundError (nothing written) for a session that must exist and does not.
    """
    for _ in range(2):
        with redis_client.pipeline(transaction=True) as pipe:
            queue_invocation(pipe, services.sessions, services.queue, record, new_session,
                             session_must_exist=session_must_exist)
            replies = pipe.execute(raise_on_error=False)
        if not scripts_missing(replies):
            break
        for source in enqueue_scripts(services.sessions, services.queue):
            redis_client.script_load(source)
    return was_queued(replies, new_session)


def send_invoke(celery: Celery, queue: str, kwargs: dict[str, Any]) -> None:
    """Send the ``adk_celery.invoke`` task; Flower and the logs show its identifiers only."""
    shown = {field: kwargs[field] for field in _SHOWN_FIELDS}  # never the message or state
    celery.send_task(TASK_INVOKE, kwargs=kwargs, queue=queue,
                     argsrepr="()", kwargsrepr=kwargs_repr(shown),
                     serializer=wire_json.NAME)


def no_session(record: InvocationRecord) -> SessionNotFoundError:
    """The error for an enqueue naming a session its user does not have."""
    return SessionNotFoundError(
        f"session_id: no session {record.session_id!r} of app {record.app_name!r}, user "
        f"{record.user_id!r} (leave it out for a new session).")
