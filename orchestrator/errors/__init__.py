"""Errors raised by the runtime, named the way ADK names them."""

from __future__ import annotations


class AdkCeleryError(Exception):
    """Base class of the runtime's own errors."""


class AlreadyExistsError(AdkCeleryError, ValueError):
    """A session (or other object) with that id already exists."""


class SessionNotFoundError(AdkCeleryError, ValueError):
    """The session does not exist."""


class InputValidationError(AdkCeleryError, ValueError):
    """Arguments are missing or inconsistent (e.g. a session file without a session id)."""


class LlmCallsLimitExceededError(AdkCeleryError):
    """The invocation made more model calls than ``RunConfig.max_llm_calls`` allows."""


class InvocationNotFoundError(AdkCeleryError, ValueError):
    """No event of the session belongs to that invocation."""


class AlreadyAnsweredError(AdkCeleryError, ValueError):
    """An event answers a call that already has its answer in the session: not appended."""


class StaleSessionError(AdkCeleryError, ValueError):
    """The session's lease was lost (expired or taken over): appending to it is refused."""


_INFRASTRUCTURE_ERRORS: list[type[BaseException]] = [StaleSessionError]


def register_infrastructure_errors(*types: type[BaseException]) -> None:
    """Declare exception types raised by our own infrastructure (a Redis client, a broker).

    Such an error is never an outcome of the invocation: it is not shown to the model, not
    committed as an error event, and the work is retried instead of failed.
    """
    for kind in types:
        if kind not in _INFRASTRUCTURE_ERRORS:
            _INFRASTRUCTURE_ERRORS.append(kind)


def is_infrastructure_error(error: BaseException) -> bool:
    """True if ``error`` (or what it was raised from) is an infrastructure error."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, tuple(_INFRASTRUCTURE_ERRORS)):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False
