"""Enqueueing an invocation: validate the request, then record it and queue its start.

The same steps serve the ``adk_celery.invoke`` task and :class:`workers.client.Client`: a
request is turned into an :class:`InvocationRecord` (a failed one when it is malformed),
and one transaction creates the session if asked, records the invocation unless its id
exists, and queues its start with the orchestrators' wake-up. The transaction is built by
:func:`queue_invocation` on any redis-py pipeline, synchronous or asyncio, so a caller's own
thread can send it without a hop to an event loop.

:func:`submit_invocation` runs those steps on a runtime's asyncio services (the
``adk_celery.invoke`` task, the HTTP API, which batches the transactions of many requests).
A :class:`~workers.client.Client`'s own steps close the module: the ``adk_celery.invoke``
arguments of an enqueue, the check of a request's app against the client's apps, the
transaction on the caller's synchronous connection (:func:`record_and_queue`), and the task
sent instead with ``enqueue_via_celery``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import redis
from google.genai import types
from pydantic import ValidationError
from redis.exceptions import NoScriptError

from config import Settings
from orchestrator import platform
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.session_queue import RedisSessionQueue
from orchestrator.backends.redis.session_scripts import check_created_if_absent
from orchestrator.backends.redis.session_service import RedisSessionService
from orchestrator.distributed.intake import (
    Limits,
    check_custom_metadata,
    check_identifier,
    check_json,
    check_message,
    check_optional_identifier,
    check_size,
    check_state_delta,
    preview,
)
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, WorkItem
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.stores import SessionKey, session_key
from orchestrator.errors import AppConfigError, PayloadError, RequestError, SessionNotFoundError

if TYPE_CHECKING:  # Celery is imported by the senders of tasks only (see send_invoke)
    from celery import Celery

    from workers.runtime import Services

SendTransaction = Callable[[Callable[[Any], None]], Awaitable[list[Any]]]
"""Sends the commands a function adds to a ``transaction=True`` pipeline; their replies,
errors in place (as ``execute(raise_on_error=False)``)."""

_KNOWN_FIELDS = frozenset({"app_name", "user_id", "session_id", "invocation_id", "new_message",
                           "state_delta", "create_session", "streaming", "custom_metadata"})


_MESSAGE_IDS = uuid.UUID("6f1c3a52-8d0e-4c55-9a57-3e2b1f0c7d41")
"""Namespace of the ids :func:`with_message_ids` derives from a message's id."""


def with_message_ids(kwargs: dict[str, Any], message_id: str | None) -> dict[str, Any]:
    """``kwargs`` with the ids a message delivered again must get again.

    An ``invoke`` message without an ``invocation_id`` (and maybe without a ``session_id``)
    would get fresh ids at each delivery: redelivered after its orchestrator died before
    acknowledging it, one message would run twice, in two sessions. Derived from the message's
    id instead, the second delivery finds the invocation it made the first time.
    """
    missing = (None, "")  # as check_optional_identifier reads them
    if not message_id or kwargs.get("invocation_id") not in missing:
        return kwargs
    ids: dict[str, Any] = {
        "invocation_id": "e-" + str(uuid.uuid5(_MESSAGE_IDS, f"invocation:{message_id}"))}
    if kwargs.get("session_id") in missing:  # a new session: the same one at every delivery
        ids["session_id"] = str(uuid.uuid5(_MESSAGE_IDS, f"session:{message_id}"))
        if kwargs.get("create_session") in (None, False):  # else refused as it stands
            ids["create_session"] = True
    return {**kwargs, **ids}


def prepare_invocation(
    kwargs: dict[str, Any], limits: Limits
) -> tuple[InvocationRecord, bool]:
    """The record an enqueue request makes, and whether it asks for a new session.

    Identifiers are checked first: a request whose app, user, session or invocation id is
    malformed cannot be filed anywhere, and raises RequestError (nothing is stored). Past
    them, a malformed message or state delta makes a failed record whose error says what
    was wrong (it is stored, so the sender finds the invocation and why it failed).
    """
    unknown = sorted(str(key) for key in kwargs if key not in _KNOWN_FIELDS)
    if unknown:
        raise RequestError(preview(unknown[0]), f"is not a field of an enqueue request "
                                                f"(fields: {', '.join(sorted(_KNOWN_FIELDS))}).")
    app_name = check_identifier("app_name", kwargs.get("app_name"), limits)
    user_id = check_identifier("user_id", kwargs.get("user_id"), limits)
    session_id = check_optional_identifier("session_id", kwargs.get("session_id"), limits)
    invocation_id = check_optional_identifier("invocation_id", kwargs.get("invocation_id"), limits)
    create_session = kwargs.get("create_session")
    if create_session is not None and not isinstance(create_session, bool):
        raise RequestError("create_session", "must be true or false.")
    if kwargs.get("new_message") is None and kwargs.get("state_delta") is None:
        raise RequestError("new_message", "is missing: an invocation needs a new_message, a "
                                          "state_delta, or both.")
    record = InvocationRecord(
        invocation_id=invocation_id or platform.new_invocation_id(),
        app_name=app_name,
        user_id=user_id,
        session_id=session_id or platform.new_uuid(),
    )
    try:
        streaming = kwargs.get("streaming")
        if streaming is not None and not isinstance(streaming, bool):
            raise PayloadError("streaming", "must be true or false.")
        record.streaming = bool(streaming)
        raw_message = kwargs.get("new_message")
        check_json("new_message", raw_message, limits)
        message = parse_message(raw_message)
        record.new_message = message.model_dump(mode="json", exclude_none=True) if message else None
        record.state_delta = check_state_delta(kwargs.get("state_delta"), limits)
        record.custom_metadata = check_custom_metadata(kwargs.get("custom_metadata"), limits)
        check_size({"new_message": record.new_message, "state_delta": record.state_delta,
                    "custom_metadata": record.custom_metadata},
                   limits.max_payload_bytes, "new_message, state_delta and custom_metadata")
    except RequestError as error:
        record.status = InvocationStatus.FAILED
        record.error = f"{type(error).__name__}: {error}"
        # Refused: none of it is kept.
        record.new_message = record.state_delta = record.custom_metadata = None
    return record, bool(create_session or session_id is None)


def refusal(record: InvocationRecord) -> str:
    """What was wrong with a request :func:`prepare_invocation` refused (for a 422).

    Without the error's type: ``record.error`` keeps it, as every failed invocation's does.
    """
    error = record.error or "the request was refused"
    kind, colon, said = error.partition(": ")
    return said if colon and kind.endswith("Error") and kind.isidentifier() else error


def queue_invocation(
    pipe: Any, sessions: RedisSessionService, queue: RedisSessionQueue,
    record: InvocationRecord, new_session: bool, *, session_must_exist: bool = False,
) -> None:
    """Add the enqueue transaction to ``pipe`` (a ``transaction=True`` pipeline).

    ``session_must_exist`` (for an existing session only): nothing is written if it does
    not exist, and :func:`was_queued` raises SessionNotFoundError. Its scripts are called by
    their sha: on :class:`NoScriptError` replies none of them ran; load
    :func:`enqueue_scripts` and send it again. Read the replies with :func:`was_queued`.
    """
    if new_session:
        sessions.queue_create_if_absent(pipe, record.app_name, record.user_id, record.session_id,
                                        unless_invocation=record.invocation_id)
    # After a new session's create, the record is stored only if the session now exists: a
    # create Redis did not know (NOSCRIPT: only some scripts cached, as when two versions
    # share a server) must not leave a queued invocation without its session.
    queue.queue_create_and_push(pipe, record, WorkItem(kind="start", invocation_id=record.invocation_id),
                                session_must_exist=session_must_exist or new_session)


def enqueue_scripts(sessions: RedisSessionService, queue: RedisSessionQueue) -> list[str]:
    """The Lua sources :func:`queue_invocation` calls by sha (to ``SCRIPT LOAD`` them)."""
    return [sessions.create_script_source, *queue.create_and_push_script_sources]


def scripts_missing(replies: list[Any]) -> bool:
    """True if Redis had forgotten a script (after a restart): send it all again.

    Nothing of it was stored: a record goes in only with its session (see
    :func:`queue_invocation`), and a session made without its record is found the next time.
    """
    return any(isinstance(reply, NoScriptError) for reply in replies)


def check_same_invocation(existing: InvocationRecord, record: InvocationRecord,
                          session_given: bool) -> InvocationRecord:
    """``existing`` if a repeated invocation id names the same invocation, else RequestError.

    An invocation id is scoped to its app, user and session: reusing another user's (or
    another session's) id is refused, and says nothing of the invocation that has it. The
    id sent again with another message or state delta is refused too: taken as the request
    sent again, that message would be lost without a word.
    """
    if existing.user_id != record.user_id or (
        session_given and existing.session_id != record.session_id
    ):
        raise RequestError("invocation_id", "is already used by another invocation; "
                                            "leave it out or choose a new one.")
    if (existing.new_message, existing.state_delta) != (record.new_message, record.state_delta):
        raise RequestError("invocation_id", "is already used by an invocation of another "
                                            "message or state_delta; send the very request "
                                            "again, or choose a new id.")
    return existing


def was_queued(replies: list[Any], new_session: bool) -> bool:
    """True if the invocation was new and its start is queued; False for a repeated id.

    Raises what a script refused with (a key of the wrong type, for instance), and
    SessionNotFoundError when the session had to exist and does not.
    """
    if new_session:
        check_created_if_absent(replies[0])
    if isinstance(replies[-1], Exception):
        raise replies[-1]
    if replies[-1] == -1:
        if new_session and isinstance(replies[0], Exception):
            return False  # not created: the invocation exists already (sent again)
        raise SessionNotFoundError("Session not found")
    return bool(replies[-1])


async def submit_invocation(
    services: Services, limits: Limits, kwargs: dict[str, Any], *,
    session_must_exist: bool = False, send: SendTransaction | None = None,
    store_refused: bool = True,
) -> tuple[InvocationRecord, SessionKey | None]:
    """Check an enqueue request, record it, and queue its start (``services``: a runtime's).

    Malformed identifiers raise RequestError (nothing is stored); a malformed message or
    state delta becomes a failed invocation whose error says what was wrong. A repeated
    invocation id changes nothing and returns the record stored first (RequestError if
    that id is another user's or another session's). ``session_must_exist``: raise
    SessionNotFoundError (nothing queued) if the request names a session that does not
    exist, in the same round trip. ``send``: how the enqueue transaction goes to Redis
    (default: a pipeline of its own; the HTTP API batches those of many requests).
    ``store_refused``: False to return a refused request's failed record without storing
    it (a door that answers the refusal itself, as the HTTP API's 422).
    """
    record, new_session = prepare_invocation(kwargs, limits)
    if record.status is InvocationStatus.FAILED:
        if session_must_exist and not new_session and not await services.redis.exists(
                keys.session(record.app_name, record.user_id, record.session_id)):
            raise SessionNotFoundError("Session not found")
        if store_refused:
            await services.store.create(record)
        return record, None

    def queue(pipe: Any) -> None:
        queue_invocation(pipe, services.sessions, services.queue, record, new_session,
                         session_must_exist=session_must_exist)

    for _ in range(2):
        replies = await (send or _send_alone(services))(queue)
        if not scripts_missing(replies):
            break
        for source in enqueue_scripts(services.sessions, services.queue):
            await services.redis.script_load(source)
    if not was_queued(replies, new_session):
        existing = await services.store.get(record.app_name, record.invocation_id)
        if existing is not None:
            record = check_same_invocation(existing, record, bool(kwargs.get("session_id")))
    return record, session_key(record)


def _send_alone(services: Services) -> SendTransaction:
    async def send(queue: Callable[[Any], None]) -> list[Any]:
        async with services.redis.pipeline(transaction=True) as pipe:
            queue(pipe)
            return await pipe.execute(raise_on_error=False)

    return send


def parse_message(value: Any) -> types.Content | None:
    """A user message as text or genai Content JSON; anything else is a PayloadError."""
    if value is None:
        return None
    if isinstance(value, str):
        return types.Content(role="user", parts=[types.Part(text=value)])
    if isinstance(value, dict):
        try:
            content = types.Content.model_validate(value)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'new_message'}: {e['msg']}"
                for e in error.errors()[:3])
            raise PayloadError("new_message", f"is not a valid Content ({problems}).") from None
        if not content.parts:
            raise PayloadError("new_message", "has no parts.")
        check_message(content)
        return content
    raise PayloadError("new_message",
                       f"must be text or a Content object, not {type(value).__name__}.")


# ---- a Client's enqueue ---------------------------------------------------------------

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
                    f"ADK_CELERY_APPS (Settings.apps): {str(error).rstrip('.')}. A client that "
                    "names apps loads them to check the app of each request (their modules "
                    "must be importable from it); leave it empty not to.") from None
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
    from workers import wire_json  # kombu's serializers: a client that sends no task skips them
    from workers.celery_app import TASK_INVOKE, kwargs_repr

    shown = {field: kwargs[field] for field in _SHOWN_FIELDS}  # never the message or state
    celery.send_task(TASK_INVOKE, kwargs=kwargs, queue=queue,
                     argsrepr="()", kwargsrepr=kwargs_repr(shown),
                     serializer=wire_json.NAME)


def no_session(record: InvocationRecord) -> SessionNotFoundError:
    """The error for an enqueue naming a session its user does not have."""
    return SessionNotFoundError(
        f"session_id: no session {record.session_id!r} of app {record.app_name!r}, user "
        f"{record.user_id!r} (leave it out for a new session).")
