"""JSON dumps of the state an event carries: lenient when shown, strict when stored.

google-adk dumps a ``state_delta`` (or ``agent_state``) holding a value of no JSON type (an
object of the user's own class, a callable) by falling back to ``repr`` with a warning, so a
caller streaming events as JSON does not crash. The Redis runtime stores events and state as
JSON; a ``repr`` standing in for a stored value would silently differ from what the code put
there, so its own dumps (:data:`STRICT_JSON`) keep raising as they always did.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, SerializationInfo, SerializerFunctionWrapHandler
from pydantic_core import to_jsonable_python

logger = logging.getLogger(__name__)

_STRICT_KEY = "adk_celery_strict_json"

STRICT_JSON: dict[str, Any] = {_STRICT_KEY: True}
"""Serialisation ``context`` of a dump that is stored or sent to another process.

Under it a value of no JSON type raises (``PydanticSerializationError``) instead of being
replaced by its ``repr``.
"""

LENIENT_FIELDS = ("state_delta", "agent_state")
"""The fields of ``EventActions`` google-adk dumps leniently (no other field is)."""


def is_strict(info: SerializationInfo) -> bool:
    """True if the dump under way asked for :data:`STRICT_JSON`."""
    context = info.context
    return isinstance(context, dict) and bool(context.get(_STRICT_KEY))


def dump_leniently(
    model: BaseModel, handler: SerializerFunctionWrapHandler, info: SerializationInfo
) -> Any:
    """Dump ``model``; in a lenient JSON dump, non-JSON values of its state fields become reprs.

    The default dump runs first, and only a failure changes anything: then each field of
    :data:`LENIENT_FIELDS` that holds a value of no JSON type is made JSON-able (rich types
    as pydantic writes them: datetimes, sets, models; anything else as its ``repr``), with
    a warning, and the copy is dumped by the same handler, so the caller's ``include`` /
    ``exclude`` still apply. A failure elsewhere in the model is raised as it was.
    """
    try:
        return handler(model)
    except Exception:
        if is_strict(info) or info.mode != "json":
            raise  # stored JSON: a repr must never stand in for a value the code stored
        replaced = _sanitised(model)
        if not replaced:
            raise
    return handler(model.model_copy(update=replaced))


def _sanitised(model: BaseModel) -> dict[str, Any]:
    """JSON-able copies of the lenient fields of ``model`` that are not JSON, by name."""
    replaced: dict[str, Any] = {}
    for name in LENIENT_FIELDS:
        value = getattr(model, name, None)
        if value is None:
            continue
        try:
            to_jsonable_python(value)
        except Exception:
            logger.warning(
                "EventActions.%s holds a value that is not JSON-serialisable; this dump writes "
                "it as its repr (the event and the session state keep the value itself).",
                name, exc_info=True,
            )
            replaced[name] = to_jsonable_python(value, serialize_unknown=True)
    return replaced
