"""With ``ADK_CELERY_API_TOKENS`` set: the token is checked before anything else of a request.

FastAPI reads and checks a request (its JSON decoded, its query, headers and body validated)
before the route runs, and a route cannot check a token first: a dependency runs after the
body's JSON is decoded, and its errors are gathered with the body's. A caller without a
token, or with one for another app, was answered 422, naming the fields the route wants and
echoing what it sent. :class:`TokenGate`, a middleware in front of the routes, answers first:

- 401 (fixed words, nothing of the request) for a request without a token the server knows,
  to any path but the public ones (``/health``, the OpenAPI docs, and the few others the
  application names), unknown paths included;
- 403 for a token that does not open the app the path names (``/apps/{app}/...``,
  ``/dev/apps/{app}/...``);
- on ``POST /run`` and ``/run_sse``, where the body names the app, 403 if the body is a JSON
  object whose ``appName`` (or ``app_name``), read as the route reads it, is an app the token
  does not open. Only a token that does not open every app has its body read for this (within
  the body size limit, outside this middleware); the body is then played back to the route.
  A body that names no app this way (not JSON, no ``appName``, not a string) goes on too: the
  token is valid and it is the body that is wrong, so the route answers the 422 naming the
  field that any token gets. That 422 comes from the body's validation alone, before the
  route reads the app, so it tells nothing of the apps the token does not open.

The routes check the token again, as they did: this is the first check, not the only one (and
the one that holds for a body the route can read but this gate could not).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError
from starlette.responses import JSONResponse
from starlette.routing import get_route_path  # the path as the router matches it
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workers.api.adk_routes import _Camel
from workers.api.security import ANY_APP, CHALLENGE, UNAUTHENTICATED, Access, closed_to, opens

RUN_PATHS = frozenset({"/run", "/run_sse"})
"""The routes whose body, not their path, names the app."""


class _RunTarget(_Camel):
    """What the gate reads of a run's body: the app it names, as ``RunAgentRequest`` reads it."""

    app_name: str


class TokenGate:
    """ASGI middleware: 401 without a known token, 403 for an app it does not open (see above).

    ``public``: the paths any caller may request; ``public_prefixes``: the path prefixes
    (static files) any caller may request.
    """

    def __init__(self, app: ASGIApp, access: Access, public: Iterable[str],
                 public_prefixes: Iterable[str] = ()) -> None:
        self.app = app
        self.access = access
        self.public = frozenset(public)
        self.public_prefixes = tuple(public_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on if its token may make it; answer 401 or 403 if not."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = get_route_path(scope)
        if path in self.public or path.startswith(self.public_prefixes):
            await self.app(scope, receive, send)
            return
        apps = self.access.token_apps(_authorization(scope))
        if apps is None:
            await _refuse(scope, receive, send, 401, UNAUTHENTICATED, CHALLENGE)
            return
        named = _app_in_path(path)
        if named is not None and not opens(apps, named):
            await _refuse(scope, receive, send, 403, closed_to(named))
            return
        if ANY_APP in apps or path not in RUN_PATHS or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        body = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away, or the size limit answered 413 and stopped the body
            messages.append(message)
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        named = _app_in_body(body)
        if named is not None and not opens(apps, named):
            await _refuse(scope, receive, send, 403, closed_to(named))
        else:  # an app it opens, or none: the route's 422 names the field (see above)
            await self.app(scope, _replay(messages, receive), send)


def _authorization(scope: Scope) -> str:
    """The request's first ``Authorization`` header ("" without one), as Starlette reads it."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            return str(value.decode("latin-1"))
    return ""


def _app_in_path(path: str) -> str | None:
    """The app a path names: ``/apps/{app}/...`` or ``/dev/apps/{app}/...`` (None: none)."""
    parts = path.split("/", 4)
    if len(parts) > 2 and parts[0] == "" and parts[1] == "apps":
        return parts[2]
    if len(parts) > 3 and parts[0] == "" and parts[1] == "dev" and parts[2] == "apps":
        return parts[3]
    return None


def _app_in_body(body: bytes) -> str | None:
    """The app a run's body names (None: not a JSON object naming one by a string)."""
    try:
        return _RunTarget.model_validate_json(body).app_name
    except ValidationError:
        return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` as it was: the messages already taken, then on."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, detail: str,
                  headers: dict[str, str] | None = None) -> None:
    """Answer ``status`` with ``{"detail": detail}`` (a websocket is closed, policy violation)."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await JSONResponse({"detail": detail}, status, headers=headers)(scope, receive, send)

