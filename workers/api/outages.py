"""Redis out of reach: a 503 the client can retry on, rather than a 500 and a traceback.

A command that finds Redis down is retried by the client for several seconds (a restart is
ridden out: :mod:`orchestrator.backends.redis.connection`) and then raises. That is the
deployment's state, not a bug of the request: :class:`OutageAnswer` answers it 503
``Redis unavailable, retry`` and logs one line. A stream already under way cannot change
its status; its frames end with an error frame instead (:func:`is_outage` tells them).

An enqueue (``/run``, ``/run_sse``, the enqueue routes) that met the outage may have been
stored by Redis before its reply was lost: its 503 also names the invocation id it tried
(:class:`EnqueueUnanswered`), and a client that sends the request again with that
``invocationId`` gets that invocation, never a second run of the turn.
"""

from __future__ import annotations

import logging

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.errors import is_infrastructure_error

logger = logging.getLogger(__name__)

UNAVAILABLE = "Redis unavailable, retry"
"""The detail of the 503, and the message of a stream's error frame."""
RETRY_AFTER_SECONDS = 1
"""What the 503 suggests waiting before retrying (a restarted Redis is back in about that)."""


class EnqueueUnanswered(Exception):
    """An enqueue met an outage: Redis may have stored the invocation, its reply lost.

    Raised from the outage; ``invocation_id`` is the id the enqueue gave the invocation.
    """

    def __init__(self, invocation_id: str) -> None:
        super().__init__(f"enqueue of {invocation_id} unanswered: Redis unavailable")
        self.invocation_id = invocation_id

    def answer(self) -> dict[str, str]:
        """The 503's body: the generic detail, the id, and what to send again."""
        return {"detail": f"{UNAVAILABLE} with \"invocationId\": \"{self.invocation_id}\" in "
                          "the request: Redis may have stored this run before its reply was "
                          "lost, and sent again with that id it is not run twice (an "
                          "invocation stored under it is answered as it stands)",
                "invocationId": self.invocation_id}


class ServerStopping(Exception):
    """The server is stopping: a follow it holds ends now, not at the graceful timeout.

    ``invocation_id``: the run a ``/run`` was following (its 503 names it: sent again with
    that id to another server, the request follows that invocation, never a second run).
    """

    def __init__(self, invocation_id: str | None = None) -> None:
        super().__init__("The server is stopping.")
        self.invocation_id = invocation_id

    def answer(self) -> dict[str, str]:
        """The 503's body."""
        if self.invocation_id is None:
            return {"detail": "The server is stopping; retry"}
        return {"detail": f"The server is stopping; invocation {self.invocation_id} was "
                          "accepted and goes on: send the request again with \"invocationId\": "
                          f"\"{self.invocation_id}\" (to another server, or once this one is "
                          "back) to follow it, never to run it twice",
                "invocationId": self.invocation_id}


def is_outage(error: BaseException) -> bool:
    """True for Redis out of reach, or another infrastructure error of the project's."""
    return (isinstance(error, RedisConnectionError | RedisTimeoutError | EnqueueUnanswered)
            or is_infrastructure_error(error))


def log_outage(what: str, error: BaseException) -> None:
    """One line for an outage a request met (its traceback says nothing more)."""
    logger.warning("%s: Redis unavailable (%s: %s)", what, type(error).__name__, error)


class OutageAnswer:
    """ASGI middleware: 503 for a request whose handling met an outage (:func:`is_outage`).

    Any other error, or one after the response started, goes on up as before.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; answer 503 if it failed on an outage before answering."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as error:
            stopping = isinstance(error, ServerStopping)
            if started or not (stopping or is_outage(error)):
                raise
            if not stopping:
                log_outage(f"{scope['method']} {scope['path']}", error)
            body = error.answer() if isinstance(error, EnqueueUnanswered | ServerStopping) \
                else {"detail": UNAVAILABLE}
            response = JSONResponse(body, status_code=503,
                                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            await response(scope, receive, send)
