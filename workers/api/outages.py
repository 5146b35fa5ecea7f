"""Redis out of reach: a 503 the client can retry on, rather than a 500 and a traceback.

A command that finds Redis down is retried by the client for several seconds (a restart is
ridden out: :mod:`orchestrator.backends.redis.connection`) and then raises. That is the
deployment's state, not a bug of the request: :class:`OutageAnswer` answers it 503
``Redis unavailable, retry`` and logs one line. A stream already under way cannot change
its status; its frames end with an error frame instead (:func:`is_outage` tells them).
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


def is_outage(error: BaseException) -> bool:
    """True for Redis out of reach, or another infrastructure error of the project's."""
    return isinstance(error, RedisConnectionError | RedisTimeoutError) or is_infrastructure_error(error)


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
            if started or not is_outage(error):
                raise
            log_outage(f"{scope['method']} {scope['path']}", error)
            response = JSONResponse({"detail": UNAVAILABLE}, status_code=503,
                                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            await response(scope, receive, send)
