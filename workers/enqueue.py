"""Enqueueing an invocation: validate the request, then record it and queue its start.

The same steps serve the ``adk_celery.invoke`` task and :class:`workers.client.Client`: a
request is turned into an :class:`InvocationRecord` (a failed one when it is malformed),
and one transaction creates the session if asked, records the invocation unless its id
exists, and queues its start with the orchestrators' wake-up. The transaction is built by
:func:`queue_invocation` on any redis-py pipeline, synchronous or asyncio, so a caller's own
thread can send it without a hop to an event loop.
"""

from __future__ import annotations

import json
from typing import Any

from google.genai import types
from redis.exceptions import NoScriptError

from orchestrator import platform
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, WorkItem
from orchestrator.distributed.redis_queue import RedisSessionQueue
from orchestrator.sessions.redis_session_scripts import check_created_if_absent
from orchestrator.sessions.redis_session_service import RedisSessionService


class PayloadError(ValueError):
    """A message or result is malformed or too large."""


def prepare_invocation(
    kwargs: dict[str, Any], max_payload_bytes: int
) -> tuple[InvocationRecord | None, bool]:
    """The record an enqueue request makes, and whether it asks for a new session.

    Bad input never raises: it makes a failed record whose error says what was wrong, or,
    without an app name and user id to file it under, ``(None, False)``.
    """
    app_name, user_id = kwargs.get("app_name"), kwargs.get("user_id")
    if not isinstance(app_name, str) or not app_name or not isinstance(user_id, str) or not user_id:
        return None, False
    record = InvocationRecord(
        invocation_id=kwargs.get("invocation_id") or platform.new_invocation_id(),
        app_name=app_name,
        user_id=user_id,
        session_id=kwargs.get("session_id") or platform.new_uuid(),
    )
    try:
        message = parse_message(kwargs.get("new_message"))
        record.new_message = message.model_dump(mode="json", exclude_none=True) if message else None
        delta = kwargs.get("state_delta")
        if delta is not None and not isinstance(delta, dict):
            raise PayloadError("state_delta must be a JSON object.")
        record.state_delta = delta
        streaming = kwargs.get("streaming")
        if streaming is not None and not isinstance(streaming, bool):
            raise PayloadError("streaming must be true or false.")
        record.streaming = bool(streaming)
        check_size({"new_message": record.new_message, "state_delta": delta},
                   max_payload_bytes, "the message")
    except (PayloadError, ValueError) as error:
        record.status = InvocationStatus.FAILED
        record.error = f"{type(error).__name__}: {error}"
    return record, bool(kwargs.get("create_session") or not kwargs.get("session_id"))


def queue_invocation(
    pipe: Any, sessions: RedisSessionService, queue: RedisSessionQueue,
    record: InvocationRecord, new_session: bool,
) -> None:
    """Add the enqueue transaction to ``pipe`` (a ``transaction=True`` pipeline).

    Its scripts are called by their sha: on :class:`NoScriptError` replies none of them ran;
    load :func:`enqueue_scripts` and send it again. Read the replies with :func:`was_queued`.
    """
    if new_session:
        sessions.queue_create_if_absent(pipe, record.app_name, record.user_id, record.session_id)
    queue.queue_create_and_push(pipe, record, WorkItem(kind="start", invocation_id=record.invocation_id))


def enqueue_scripts(sessions: RedisSessionService, queue: RedisSessionQueue) -> list[str]:
    """The Lua sources :func:`queue_invocation` calls by sha (to ``SCRIPT LOAD`` them)."""
    return [sessions.create_script_source, queue.create_and_push_script_source]


def scripts_missing(replies: list[Any]) -> bool:
    """True if Redis had forgotten the scripts (after a restart): nothing of it ran."""
    return any(isinstance(reply, NoScriptError) for reply in replies)


def was_queued(replies: list[Any], new_session: bool) -> bool:
    """True if the invocation was new and its start is queued; False for a repeated id.

    Raises what a script refused with (a key of the wrong type, for instance).
    """
    if new_session:
        check_created_if_absent(replies[0])
    if isinstance(replies[-1], Exception):
        raise replies[-1]
    return bool(replies[-1])


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
