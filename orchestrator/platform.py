"""Id and clock providers behind context variables, so tests and replays can fix them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar

_id_provider: ContextVar[Callable[[], str]] = ContextVar(
    "adk_celery_id_provider", default=lambda: str(uuid.uuid4())
)
_time_provider: ContextVar[Callable[[], float]] = ContextVar(
    "adk_celery_time_provider", default=time.time
)


def new_uuid() -> str:
    """Return a fresh uuid4 string (or whatever the current id provider makes)."""
    return _id_provider.get()()


def get_time() -> float:
    """Return the current time in float seconds from the current time provider."""
    return _time_provider.get()()


def set_id_provider(provider: Callable[[], str]) -> None:
    """Replace the id provider for the current context (deterministic tests)."""
    _id_provider.set(provider)


def set_time_provider(provider: Callable[[], float]) -> None:
    """Replace the time provider for the current context (deterministic tests)."""
    _time_provider.set(provider)


def new_invocation_id() -> str:
    """Return an invocation id in ADK's format, ``e-<uuid4>``."""
    return "e-" + new_uuid()


def new_function_call_id() -> str:
    """Return a client-side function-call id in ADK's format, ``adk-<uuid4>``."""
    return "adk-" + new_uuid()
