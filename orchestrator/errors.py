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


class StaleSessionError(AdkCeleryError, ValueError):
    """The session's lease was lost (expired or taken over): appending to it is refused."""
