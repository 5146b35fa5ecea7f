"""The one JSON codec of everything stored in Redis, and decoding of Redis replies."""

from __future__ import annotations

import json
from typing import Any

_JSON_SEPARATORS = (",", ":")


def dumps(value: Any) -> str:
    """Encode a value with the project's single JSON codec (compact, UTF-8, no NaN/inf).

    Raises ``TypeError`` (not JSON-serialisable) or ``ValueError`` (NaN/infinity, circular
    reference) from ``json.dumps``; callers re-raise with the offending key named.
    """
    return json.dumps(value, separators=_JSON_SEPARATORS, ensure_ascii=False, allow_nan=False)


def loads(raw: str | bytes) -> Any:
    """Decode a value written by :func:`dumps`."""
    return json.loads(raw)


def encode_value(value: Any, *, what: str) -> str:
    """Encode ``value`` with :func:`dumps`; on failure raise an error naming ``what``.

    ``what`` describes the value, e.g. ``"state key 'user:x'"``. The error keeps the type
    ``json.dumps`` raised (``TypeError`` or ``ValueError``).
    """
    try:
        return dumps(value)
    except TypeError as exc:
        raise TypeError(
            f"The value of {what} is not JSON-serialisable ({type(value).__name__}): {exc}. "
            "Redis-backed services store values as JSON; use JSON types "
            "(dict, list, str, int, float, bool, None)."
        ) from exc
    except ValueError as exc:
        raise ValueError(
            f"The value of {what} cannot be stored as JSON: {exc}. Redis-backed services store "
            "values as strict JSON (no NaN/infinity, no circular references)."
        ) from exc


def text(value: str | bytes) -> str:
    """Return a Redis reply item as ``str`` (clients may or may not decode responses)."""
    return value.decode() if isinstance(value, bytes) else value


def decode_hash(raw: dict[Any, Any]) -> dict[str, Any]:
    """Decode an HGETALL reply whose values were written by :func:`dumps`."""
    return {text(field): loads(value) for field, value in raw.items()}


def pairs_to_dict(flat: list[Any]) -> dict[Any, Any]:
    """Turn a flat ``[field, value, field, value, ...]`` reply (HGETALL in Lua) into a dict."""
    return dict(zip(flat[0::2], flat[1::2], strict=True))
