"""Every exception class of the project, named the way ADK names them.

The modules that raise them re-export the ones that lived there before (``RequestError`` in
``orchestrator.distributed.intake``, ``AnswerRejectedError`` in ``orchestrator.distributed.stores``,
...), and google-adk's module paths (``orchestrator.errors.session_not_found_error``, ...) hold
theirs. Classes and the checks that sort them; nothing of the project imported: any module
can import this one without a cycle.
"""

from __future__ import annotations

from collections.abc import Iterator


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


class InvocationCancelledError(AdkCeleryError):
    """An event of a cancelled invocation was not appended: the invocation ends cancelled."""


class AppConfigError(AdkCeleryError, ValueError):
    """An app that cannot be served as configured (said at start-up, naming what to change)."""


class UnknownAppError(AdkCeleryError, LookupError):
    """No app of that name is registered."""


# --- Bad input from outside (a client, the HTTP API, a Celery message) ------------------------


class RequestError(ValueError):
    """A request is malformed, too large or not allowed; ``field`` names what was wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class PayloadError(RequestError):
    """A message, state delta, answer or tool result is malformed or too large."""


class AnswerRejectedError(ValueError):
    """A call id that is unknown or already answered."""


class UnknownInvocationError(AnswerRejectedError):
    """An answer for an invocation that does not exist (never made, or expired)."""


def no_invocation_text(app_name: str, invocation_id: str) -> str:
    """How every door says an invocation does not exist (the CLI, the client, the API, tasks)."""
    return f"no invocation {invocation_id!r} of app {app_name!r}."


# --- Remote work that failed -----------------------------------------------------------------


class RemoteToolError(RuntimeError):
    """A remote call failed outside its tool run; given to the orchestrator's error callbacks.

    That is a deadline, a lost job or an oversized result: errors the worker's callbacks
    never saw. Also the deadline of a tool call a ParallelAgent branch makes in its job on
    a worker (offered to that branch's callbacks there).
    """


class RemoteBranchError(RuntimeError):
    """A branch failed on its worker; the invocation fails as it would in process."""


class ToolExitError(RuntimeError):
    """A tool raised what is not an ``Exception``: ``SystemExit``, ``KeyboardInterrupt``, ...

    A tool wrapping argparse or click calls ``sys.exit`` on bad input; left as it is, that
    exception would end the event loop running the tool (asyncio re-raises it out of the
    loop) or the worker's pool thread. So it is the tool's error like any other: offered to
    the on_tool_error callbacks as this exception, then the call's error answer (on a
    worker) or the invocation's failure (in process), worded as the tool's own exception
    (``SystemExit: 3``: :func:`error_text`). ``error`` is what the tool raised (also its
    ``__cause__``). Never an ``asyncio.CancelledError`` (that stops a call), and never a
    ``KeyboardInterrupt`` caught on the main thread (that may be the user's Ctrl-C).
    """

    def __init__(self, error: BaseException) -> None:
        name = type(error).__name__
        super().__init__(f"{name}: {error}" if str(error) else name)
        self.error = error
        self.__cause__ = error


def error_name(error: BaseException) -> str:
    """The name an error is reported by (an error event's ``error_code``).

    Its class's, or for a :class:`ToolExitError` the class of what the tool raised.
    """
    return type(error.error if isinstance(error, ToolExitError) else error).__name__


_REPORTED = "_adk_celery_error_event_emitted"


def mark_reported(error: BaseException) -> bool:
    """Mark ``error`` as having its error event in its run's log; False if it was already.

    The agent whose run an error leaves commits that event once, however many agents it
    passes through on its way out of the run.
    """
    if getattr(error, _REPORTED, False):
        return False
    setattr(error, _REPORTED, True)
    return True


def unmark_reported(error: BaseException) -> None:
    """Forget the mark of :func:`mark_reported`.

    For an error that leaves a run of its own (an ``AgentTool``'s) for another run, whose
    agent commits its own error event there.
    """
    error.__dict__.pop(_REPORTED, None)


def error_text(error: BaseException) -> str:
    """``Name: message`` of an error, as a model or a caller reads it (see :func:`error_name`)."""
    return str(error) if isinstance(error, ToolExitError) else f"{type(error).__name__}: {error}"


# --- Models ----------------------------------------------------------------------------------


class GeminiConfigurationError(ValueError):
    """Raised when Gemini cannot be used because no API key is configured."""


class ModelRequestsBlockedError(RuntimeError):
    """Raised when a real model is called while model requests are blocked."""


# --- Infrastructure: never an outcome of the invocation ---------------------------------------


class FailpointError(ConnectionError):
    """Raised by an ``error`` failpoint: stands for a Redis or broker connection error."""


class ServiceUnavailableError(ConnectionError):
    """A runtime service that tools and agents call (artifacts) could not reach its store.

    Raised instead of the store's own error, so that code running a tool can tell it from
    the tool's own failures (a tool may talk to a Redis of its own): the call is run again
    once the store is back, never answered with this error.
    """


_INFRASTRUCTURE_ERRORS: list[type[BaseException]] = [
    StaleSessionError, FailpointError, ServiceUnavailableError]


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
    kinds = tuple(_INFRASTRUCTURE_ERRORS)
    return any(isinstance(linked, kinds) for linked in _linked(error, context=False))


def raised_by_service(error: BaseException) -> bool:
    """True if ``error`` is, was raised from, or while handling a :class:`ServiceUnavailableError`.

    A tool that wraps the error of a service it called (``raise ToolError(...) from error``)
    still failed for the infrastructure, not for itself.
    """
    return any(isinstance(linked, ServiceUnavailableError)
               for linked in _linked(error, context=True))


def _linked(error: BaseException, *, context: bool) -> Iterator[BaseException]:
    """``error`` and the errors it was raised from (and, with ``context``, while handling)."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        links = (current.__cause__, current.__context__) if context else (current.__cause__,)
        pending.extend(linked for linked in links if linked is not None)
