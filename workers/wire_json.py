"""The JSON our task messages travel in: plain JSON both ways, nothing turned into objects.

kombu's ``json`` serializer decodes any JSON object whose keys are exactly ``__type__`` and
``__value__`` into a Python object (its type envelope: ``{"__type__": "date", "__value__":
"2020-01-01"}`` becomes a ``datetime.date``; an unknown ``__type__`` makes the whole message
undecodable). A job carries what a model, a client or a tool wrote (arguments, state, events),
so such a value would reach the tool changed, or its message would be dropped. Our task
messages are sent with :data:`NAME` instead: standard JSON, strict (no NaN or Infinity, no
values JSON has no type for), decoded by :func:`json.loads` alone, under a content type of
its own (:data:`CONTENT_TYPE`) so that kombu's decoder never sees them.

:func:`register` installs it in kombu's registry; :mod:`workers.celery_app` calls it as it
is imported, so every process that builds our Celery app (orchestrators, workers, Flower,
the client, the API) can send and read it. Plain ``json`` messages are still accepted
(services that ``send_task`` our task names with stock Celery); a value shaped like the
envelope in one is refused by the consumer (:mod:`workers.consumer`), naming where it is.
"""

from __future__ import annotations

import json
from typing import Any

from kombu.serialization import registry

NAME = "adk-json"
"""The serializer's name (``task_serializer``)."""

CONTENT_TYPE = "application/x-adk-celery+json"
"""The content type of messages it encodes (in ``accept_content``)."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def dumps(value: Any) -> str:
    """Standard JSON of ``value``; TypeError or ValueError if it is not plain JSON."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def loads(data: bytes | str) -> Any:
    """The value of a message body written by :func:`dumps` (UTF-8): objects stay dicts."""
    if isinstance(data, memoryview):
        data = data.tobytes()
    text = bytes(data).decode("utf-8") if isinstance(data, bytes | bytearray) else data
    return json.loads(text, parse_constant=_refuse_constant)


def register() -> None:
    """Install the serializer in kombu's registry (idempotent)."""
    registry.register(NAME, dumps, loads, content_type=CONTENT_TYPE, content_encoding="utf-8")


def envelope_path(value: Any, root: str = "body") -> str | None:
    """Where ``value`` (decoded plain JSON) holds an object shaped like kombu's type envelope.

    The first such object's path (``body[1].state_delta.note``), or None. Keys are shown
    only when short and printable (they may be a client's data). A path is spelled out only
    for the object found: the walk keeps a link to each item's parent, not its path.
    """
    stack: list[tuple[Any, Any]] = [(value, None)]
    while stack:
        item, link = stack.pop()
        if isinstance(item, dict):
            if item.keys() == {"__type__", "__value__"}:
                return _spelled(root, link)
            stack.extend((child, (link, key)) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((child, (link, index)) for index, child in reversed(list(enumerate(item))))
    return None


def _spelled(root: str, link: Any) -> str:
    """The path a chain of ``(parent link, key or index)`` links names."""
    steps: list[str] = []
    while link is not None:
        link, step = link
        steps.append(f"[{step}]" if isinstance(step, int) else f".{_key(step)}")
    return root + "".join(reversed(steps))


def _key(key: Any) -> str:
    text = str(key)
    return text if len(text) <= 40 and text.isprintable() and "." not in text else "[...]"
