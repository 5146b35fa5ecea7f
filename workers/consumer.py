"""The workers' message consumer: Celery's, except for messages it cannot take.

Celery's own consumer logs the whole body of a message it cannot decode (invalid UTF-8,
JSON nested past the decoder's limit), of a task message it refuses (pickle, a malformed
header) and of a task it does not know, and leaves the sender of an undecodable message
without an answer. Those bodies are whatever a client sent, personal data included, and
an identifier in them can forge log lines. This consumer logs one line saying what was
refused and why (the task id and name escaped, never the body) and, when the message
names its task id, stores a failure for it, so a sender waiting on the result gets the
reason instead of waiting forever.

A task message in stock Celery's ``json`` (a service that sends our task names with plain
Celery) holding an object shaped like kombu's type envelope (``{"__type__": ...,
"__value__": ...}``) is refused the same way, saying where that object is: kombu's decoder
would turn it into another value (a date, bytes...) or fail on it, so the task would get
something other than what was sent. Our own messages are plain JSON of their own content
type (:mod:`workers.wire_json`) and carry such objects unchanged.

The tasks Celery registers on every app by itself (``celery.*``: canvas helpers, backend
clean-up) are refused as unknown: adk-celery sends none of them, and one message of
``celery.chord_unlock`` retries itself on the queue it was sent to.

Selected by ``worker_consumer`` in :mod:`workers.celery_app`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery.exceptions import NotRegistered
from celery.worker.consumer import Consumer as CeleryConsumer
from vine import promise

from workers.wire_json import CONTENT_TYPE, envelope_path

logger = logging.getLogger(__name__)

_CELERY_OWN = "celery."
"""The prefix of the tasks Celery registers by itself on every app."""

_MAX_ID_CHARS = 255
"""Longest task id a failure is stored under (a longer one is not a task id we sent)."""


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Celery's consumer; refused messages are answered and logged without their bodies.

    A task message whose body is over ``max_task_message_bytes`` is refused before its body
    is parsed: its JSON, then the checks of its payload, would take many times its size in
    memory (a 150 MB message took an orchestrator from 106 MB to 1.7 GB) and hold the pool.
    """

    def create_task_handler(self, promise: Any = promise) -> Any:
        """Celery's handler of task messages, behind a check of the body's size."""
        handle = super().create_task_handler(promise)
        limit = self.app.adk_settings.max_task_message_bytes

        def on_task_received(message: Any) -> Any:
            name = _header(message, "task")
            if isinstance(name, str) and name.startswith(_CELERY_OWN):
                # Celery registers tasks of its own (canvas helpers, backend_cleanup) on every
                # app; none is sent by adk-celery, and one (chord_unlock) retries itself
                # from a single message. Only adk-celery's tasks run here.
                self.on_unknown_task(None, message, NotRegistered(name))
                return None
            size = len(message.body) if isinstance(message.body, bytes | str) else 0
            if limit and size > limit:
                self._refuse(message, f"its body is {size} bytes, over the limit of {limit} "
                                      "(ADK_CELERY_MAX_TASK_MESSAGE_BYTES)")
                message.ack()
                return None
            if message.content_type == "application/json" and (where := _envelope_in(message)):
                self._refuse(message, f"{where} is an object shaped like kombu's type envelope "
                                      '({"__type__": ..., "__value__": ...}), which the "json" '
                                      "content type decodes into another value",
                             ValueError(f"Message refused: {where} is an object shaped like "
                                        "kombu's type envelope, which the 'json' content type "
                                        f"would change; send such a value as {CONTENT_TYPE} "
                                        "(see the README) or not at all."))
                message.ack()
                return None
            return handle(message)

        return on_task_received

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        """A body that is not valid JSON (or not UTF-8): answer the sender, ack the message."""
        self._refuse(message, f"its body could not be decoded ({type(exc).__name__})")
        message.ack()

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        """A task message we do not accept (a content type other than JSON, bad headers)."""
        self._refuse(message, f"it is not a valid task message ({type(exc).__name__})")
        message.reject_log_error(logger, self.connection_errors)

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        """A task name no worker here runs."""
        name = _header(message, "task")
        self._refuse(message, f"no task {name!r} runs here", NotRegistered(str(name)))
        message.reject_log_error(logger, self.connection_errors)

    def _refuse(self, message: Any, reason: str, error: Exception | None = None) -> None:
        task_id, name = _header(message, "id"), _header(message, "task")
        logger.error("Refused message (task %r, id %r): %s; it was dropped.",
                     _short(name), _short(task_id), reason)
        if not isinstance(task_id, str) or not task_id or len(task_id) > _MAX_ID_CHARS:
            return
        try:
            self.app.backend.mark_as_failure(task_id, error or ValueError(
                f"Message refused: {reason}. Send JSON task messages (UTF-8 text)."))
            if self.event_dispatcher:
                self.event_dispatcher.send("task-failed", uuid=task_id, exception=reason)
        except Exception as store_error:  # answering is best effort; the refusal stands
            logger.warning("Could not store the refusal of task %r: %s",
                           _short(task_id), type(store_error).__name__)


def _envelope_in(message: Any) -> str | None:
    """Where a ``json`` message's body holds a kombu type envelope.

    None: nowhere, or the body is not plain JSON (kombu's decoder then refuses it as usual).
    """
    try:
        body = json.loads(message.body)
    except Exception:  # noqa: BLE001 - undecodable: Celery's decode step refuses it
        return None
    if isinstance(body, list) and len(body) == 3:  # task protocol 2: [args, kwargs, embed]
        return next(filter(None, (envelope_path(part, name) for part, name in zip(
            body, ("args", "kwargs", "embed"), strict=True))), None)
    return envelope_path(body)


def _header(message: Any, name: str) -> Any:
    headers = getattr(message, "headers", None)
    return headers.get(name) if isinstance(headers, dict) else None


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
