"""What a client may send: the checks every door applies before anything is stored.

Enqueue requests, answers and cancels reach us through the ``adk_celery.*`` tasks, the
:class:`~workers.client.Client`, the CLI and the embedded runtime; each passes its input
through the functions here, so one request is judged the same whatever door it took. A
check that fails raises :class:`RequestError` naming the field and what was wrong, and
nothing of the request is stored.

The rules (limits in :class:`Limits`, set from the settings):

- identifiers (app, user, session, invocation and call ids) are strings of at most
  ``max_identifier_length`` characters matching ``identifier_pattern``: no whitespace, no
  control characters, so they never forge a log line or a Redis key;
- JSON payloads (message, state delta, answer) nest at most ``max_nesting_depth`` deep, hold
  no NaN or Infinity (JSON has neither; they are refused, not turned into ``null``) and no
  lone surrogates (they cannot be encoded as UTF-8), and their keys are strings;
- a user message carries text and data, never function calls or function responses: an
  answer to a pending call goes through the answer path, which checks that the call is
  pending and takes it once;
- a client's ``state_delta`` writes session state; ``app:`` keys (every user's state) only
  when ``client_app_state`` allows it, ``user:`` keys (the sender's own user state) unless
  ``client_user_state`` forbids it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from google.genai import types
from pydantic import ValidationError

from config import Settings
from orchestrator.errors import PayloadError, RequestError
from orchestrator.sessions.state import State
from orchestrator.tools.tool_confirmation import ToolConfirmation

_DEFAULT = Settings.model_fields  # one source for the defaults: the settings


@dataclass(frozen=True)
class Limits:
    """The limits and permissions requests are checked against (see the settings)."""

    max_identifier_length: int = _DEFAULT["max_identifier_length"].default
    identifier_pattern: str = _DEFAULT["identifier_pattern"].default
    max_payload_bytes: int = _DEFAULT["max_payload_bytes"].default
    max_nesting_depth: int = _DEFAULT["max_nesting_depth"].default
    client_app_state: bool = _DEFAULT["client_app_state"].default
    client_user_state: bool = _DEFAULT["client_user_state"].default

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        """The limits a :class:`config.Settings` sets."""
        return cls(
            max_identifier_length=settings.max_identifier_length,
            identifier_pattern=settings.identifier_pattern,
            max_payload_bytes=settings.max_payload_bytes,
            max_nesting_depth=settings.max_nesting_depth,
            client_app_state=settings.client_app_state,
            client_user_state=settings.client_user_state,
        )


_compiled: dict[str, re.Pattern[str]] = {}


def _pattern(source: str) -> re.Pattern[str]:
    pattern = _compiled.get(source)
    if pattern is None:
        pattern = _compiled[source] = re.compile(source)
    return pattern


def preview(value: Any, limit: int = 40) -> str:
    """A short, escaped rendering of a client's value, safe in an error or a log line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_identifier(field: str, value: Any, limits: Limits) -> str:
    """``value`` if it is a well-formed identifier, else RequestError naming ``field``."""
    if value is None:
        raise RequestError(field, "is required.")
    if not isinstance(value, str):
        raise RequestError(field, f"must be a string, not {type(value).__name__}.")
    if not value:
        raise RequestError(field, "must not be empty.")
    if len(value) > limits.max_identifier_length:
        raise RequestError(field, f"is {len(value)} characters long, over the limit of "
                                  f"{limits.max_identifier_length} (ADK_CELERY_MAX_IDENTIFIER_LENGTH).")
    if not _pattern(limits.identifier_pattern).fullmatch(value):
        raise RequestError(field, f"{preview(value)} has characters outside "
                                  f"{limits.identifier_pattern} (ADK_CELERY_IDENTIFIER_PATTERN).")
    return value


def check_optional_identifier(field: str, value: Any, limits: Limits) -> str | None:
    """None for a missing (None or empty) value, else :func:`check_identifier`."""
    if value is None or value == "":
        return None
    return check_identifier(field, value, limits)


def check_custom_metadata(value: Any, limits: Limits) -> dict[str, Any] | None:
    """``custom_metadata`` of an enqueue: None, or a JSON object (PayloadError otherwise)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise PayloadError("custom_metadata", f"must be a JSON object, not {type(value).__name__}.")
    check_json("custom_metadata", value, limits)
    return value


def check_json(field: str, value: Any, limits: Limits) -> None:
    """Raise PayloadError if ``value`` is not plain JSON within the nesting limit.

    Refused: NaN and Infinity, strings (and keys) with lone surrogates, non-string keys,
    values JSON has no type for, and containers nested deeper than ``max_nesting_depth``.
    """
    # Iterative, so a hostile depth never reaches Python's recursion limit.
    stack: list[tuple[str, Any, int]] = [(field, value, 0)]
    while stack:
        where, item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(where, item)
        elif isinstance(item, bool) or item is None or isinstance(item, int):
            continue
        elif isinstance(item, float):
            if math.isnan(item) or math.isinf(item):
                raise PayloadError(where, f"{item} is not a JSON number (NaN and Infinity are refused).")
        elif isinstance(item, dict | list | tuple):
            if depth >= limits.max_nesting_depth:
                raise PayloadError(where, f"nests deeper than {limits.max_nesting_depth} levels "
                                          "(ADK_CELERY_MAX_NESTING_DEPTH).")
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise PayloadError(where, f"has a key of type {type(key).__name__}; "
                                                  "JSON keys are strings.")
                    _check_text(f"{where} key", key)
                    stack.append((f"{where}.{_short(key)}", child, depth + 1))
            else:
                stack.extend((f"{where}[{i}]", child, depth + 1) for i, child in enumerate(item))
        else:
            raise PayloadError(where, f"a {type(item).__name__} is not JSON.")


def not_json_answer(tool_name: str, parts: dict[str, Any], limits: Limits) -> str | None:
    """The error a tool is answered with when a part of its result is not JSON, else None.

    ``parts``: what the tool's answer is made of, by name (``response``, ``state_delta``,
    ...): the error names the first place found that is not JSON. Such a result could be
    neither stored nor read back, and running the tool again would not mend it; a tool job
    and a tool called in a ParallelAgent branch's job are answered with this, once.
    """
    try:
        for field, value in parts.items():
            check_json(field, value, limits)
    except PayloadError as error:
        return (f"The result of tool {tool_name!r} is not JSON: {error} Tools return and store "
                "JSON types (dict, list, str, int, float, bool, None).")
    return None


def _short(key: str) -> str:
    return key if len(key) <= 40 and key.isprintable() else preview(key)


def _check_text(where: str, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise PayloadError(where, "holds a lone surrogate (not valid Unicode text).") from None


def check_size(payload: Any, limit: int, what: str) -> None:
    """Raise PayloadError if ``payload`` is more than ``limit`` bytes of JSON."""
    size = len(json.dumps(payload, default=str).encode("utf-8", "replace"))
    if size > limit:
        raise PayloadError(what, f"is {size} bytes of JSON, over the limit of {limit} bytes "
                                 "(ADK_CELERY_MAX_PAYLOAD_BYTES).")


def check_message(content: types.Content) -> None:
    """Refuse a user message that carries function calls or function responses.

    Answers to pending calls come in through the answer path (``Client.answer``, the
    ``adk_celery.answer`` task), which takes them only for a call the invocation waits for,
    and only once.
    """
    for i, part in enumerate(content.parts or []):
        if part.function_response is not None:
            raise PayloadError(
                f"new_message.parts[{i}].function_response",
                "a user message cannot answer a function call; answer a pending call with "
                "Client.answer, the adk_celery.answer task, or over HTTP the answer route "
                "or a /run message of function responses alone.")
        if part.function_call is not None:
            raise PayloadError(f"new_message.parts[{i}].function_call",
                               "a user message cannot carry a function call.")


def check_state_delta(delta: Any, limits: Limits) -> dict[str, Any] | None:
    """``delta`` if a client may apply it, else PayloadError naming the refused key."""
    if delta is None:
        return None
    if not isinstance(delta, dict):
        raise PayloadError("state_delta", f"must be a JSON object, not {type(delta).__name__}.")
    check_json("state_delta", delta, limits)
    check_size(delta, limits.max_payload_bytes, "state_delta")
    for key in delta:
        if key.startswith(State.APP_PREFIX) and not limits.client_app_state:
            raise PayloadError(f"state_delta.{_short(key)}",
                               "app: keys are shared by every user of the app; clients may not "
                               "write them (ADK_CELERY_CLIENT_APP_STATE).")
        if key.startswith(State.USER_PREFIX) and not limits.client_user_state:
            raise PayloadError(f"state_delta.{_short(key)}",
                               "clients may not write user: keys (ADK_CELERY_CLIENT_USER_STATE).")
    return delta


def check_answer(
    invocation_id: Any, function_call_id: Any, response: Any, limits: Limits
) -> dict[str, Any]:
    """The response of an answer if it is well-formed, else RequestError naming the field."""
    check_identifier("invocation_id", invocation_id, limits)
    check_identifier("function_call_id", function_call_id, limits)
    if not isinstance(response, dict):
        raise PayloadError("response", f"must be a JSON object, not {type(response).__name__}.")
    check_json("response", response, limits)
    check_size(response, limits.max_payload_bytes, "response")
    return response


def check_confirmation(response: dict[str, Any]) -> None:
    """An answer to an ``adk_request_confirmation`` call must read as a tool confirmation.

    (``{"confirmed": bool, "hint"?, "payload"?}``, or that as JSON text under ``response``.)
    Refused here, naming the field, rather than failing the invocation when it resumes.
    """
    try:
        ToolConfirmation.from_response_dict(response)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise PayloadError(f"response.{where}" if where else "response",
                           f"{first['msg']} (a tool confirmation is {{\"confirmed\": true|false, "
                           f"\"hint\"?, \"payload\"?}}).") from None
    except ValueError as error:  # the JSON text under "response" does not parse
        raise PayloadError("response.response", f"is not JSON: {error}.") from None
