"""``POST /run`` answered before FastAPI's routing, request parsing and dependency solving.

``/run`` is the route under load, and a request to it spends more of the server's time in the
framework than in its own work: the exception and exit-stack layers, the route matched
through the included routers, the body decoded to Python objects and validated field by field
through the dependency solver, the endpoint wrapped in exit stacks and an exception wrapper
of its own. :class:`DirectRun`, the innermost middleware, takes a ``POST /run`` whose body is
JSON (``application/json`` or a ``+json`` type, as FastAPI reads them), reads it, validates it
with the route's own pydantic model straight from its bytes, and hands it to the function the
FastAPI route calls (:func:`~workers.api.adk_routes.run_response`).

What a client sees is the FastAPI route's, by construction rather than by imitation:

- a request it does not take (another method or path, another content type, a body that
  does not validate, a body cut short or refused by the size limit) goes on to FastAPI with
  the body it read played back, so those answers (field-named 422s, 405, 400, 413) are
  FastAPI's and the other middlewares' own;
- the refusals of ``/run`` itself (401, 403, 404, 422, 500) are HTTPExceptions raised by the
  shared function and answered by the application's own handler for them, as FastAPI's
  exception layer would; any other error goes up to the application's server-error layer;
- it sits inside every middleware the application adds (body size limit, CORS, the token
  gate, the local guard), and the FastAPI route stays registered: ``/run`` is listed at ``/docs``.

What it passes by: FastAPI's own spans of the route's steps (dependencies, endpoint) where
FastAPI's OpenTelemetry support is on (the request's span is made outside, as before), and
any dependency the route or its router would have: they have none
(``tests/test_api_direct_run.py`` checks that they still have none).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workers.api.adk_routes import RunAgentRequest, run_response
from workers.api.disconnects import unless_gone

PATH = "/run"


class DirectRun:
    """ASGI middleware: ``POST /run`` with a JSON body, past FastAPI (see the module docstring).

    Add it before any other middleware, so that it is the innermost one.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a ``POST /run``; pass anything else on."""
        if not (scope["type"] == "http" and scope["method"] == "POST"
                and scope["path"] == scope.get("root_path", "") + PATH and _json_content(scope)):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        body = b""
        try:
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request":
                    raise _CutShort
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
            request_body = RunAgentRequest.model_validate_json(body)
        except (_CutShort, ValidationError):
            await self.app(scope, _replay(messages, receive), send)
            return
        except Exception as error:  # a receive that failed (the body over the size limit)
            await self.app(scope, _replay(messages, receive, error), send)
            return
        request = Request(scope, receive, send)
        try:
            response = await unless_gone(run_response(request, request_body), receive)
        except HTTPException as error:
            response = await _handled(request, error)
        if response is not None:
            await response(scope, receive, send)


class _CutShort(Exception):
    """The client went away before the whole body came."""


def _json_content(scope: Scope) -> bool:
    """Whether the request says its body is JSON, as FastAPI reads it.

    ``application/json`` or ``application/<anything>+json``, any parameters: a type FastAPI
    parses that this took for another went to the route (which, before it watched for a
    client gone, followed its run to the end after the client had left).
    """
    for name, value in scope["headers"]:
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or (
                media.startswith(b"application/") and media.endswith(b"+json"))
    return False


def _replay(messages: list[Message], receive: Receive, error: Exception | None = None) -> Receive:
    """``receive`` as it was: the messages already taken, then ``error`` if it failed, then on."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        if error is not None:
            raise error
        return await receive()

    return replayed


async def _handled(request: Request, error: HTTPException) -> Any:
    """The response of the application's handler for ``error``, found as Starlette finds it.

    A handler for its status code first, then one for its class or the nearest base class.
    """
    handlers: dict[Any, Any] = request.app.exception_handlers
    handler = handlers.get(error.status_code)
    if handler is None:
        handler = next(handlers[cls] for cls in type(error).__mro__ if cls in handlers)
    return await handler(request, error)
