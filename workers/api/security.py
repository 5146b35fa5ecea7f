"""Who may call ``adk-celery api``: bearer tokens, the apps each may use, CORS, body sizes."""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from config import Settings

ANY_APP = "*"
"""In a token's list of apps: every app."""
UNAUTHENTICATED = "a valid bearer token is required (Authorization: Bearer ...)"
"""The detail of every 401: it says what is missing, and nothing of the request."""
CHALLENGE = {"WWW-Authenticate": "Bearer"}
"""The headers of every 401."""


@dataclass(frozen=True)
class Access:
    """The tokens the server accepts and the apps each opens; no tokens = no authentication."""

    tokens: dict[str, frozenset[str]]

    @classmethod
    def from_settings(cls, settings: Settings) -> Access:
        """Parse ``ADK_CELERY_API_TOKENS``; ValueError naming the setting if malformed."""
        # Empty is unset, as docker-compose.yml passes it without API_TOKENS: no tokens, so
        # loopback only (said at start-up), not "not a JSON object".
        if settings.api_tokens is None or not settings.api_tokens.get_secret_value().strip():
            return cls({})
        try:
            raw = json.loads(settings.api_tokens.get_secret_value())
        except ValueError:
            raise ValueError("ADK_CELERY_API_TOKENS: not a JSON object") from None
        if not isinstance(raw, dict) or not all(
            isinstance(token, str) and token and isinstance(apps, list)
            and all(isinstance(app, str) for app in apps) for token, apps in raw.items()
        ):
            raise ValueError('ADK_CELERY_API_TOKENS: must map tokens to lists of app names, '
                             'e.g. {"token": ["app"]} or {"token": ["*"]}')
        return cls({token: frozenset(apps) for token, apps in raw.items()})

    @property
    def required(self) -> bool:
        """True when requests must carry a token."""
        return bool(self.tokens)

    def token_apps(self, authorization: str) -> frozenset[str] | None:
        """The apps an ``Authorization`` header's bearer token opens; None for no known token.

        Tokens are compared in constant time.
        """
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token:
            for known, apps in self.tokens.items():
                if hmac.compare_digest(known.encode(), token.strip().encode()):
                    return apps
        return None

    def apps_of(self, request: Request) -> frozenset[str] | None:
        """The apps the request's token opens (None: every app, no tokens configured).

        Raises 401 without a known token.
        """
        if not self.tokens:
            return None
        apps = self.token_apps(request.headers.get("authorization", ""))
        if apps is None:
            raise HTTPException(401, UNAUTHENTICATED, headers=CHALLENGE)
        return apps

    def check_app(self, request: Request, app_name: str) -> None:
        """403 unless the request's token opens ``app_name`` (401 without a token)."""
        apps = self.apps_of(request)
        if apps is not None and not opens(apps, app_name):
            raise HTTPException(403, closed_to(app_name))

    def visible(self, request: Request, names: list[str]) -> list[str]:
        """The app names the request's token opens, of ``names``."""
        apps = self.apps_of(request)
        if apps is None or ANY_APP in apps:
            return names
        return [name for name in names if name in apps]


def opens(apps: frozenset[str], app_name: str) -> bool:
    """Whether a token that opens ``apps`` may use ``app_name``."""
    return ANY_APP in apps or app_name in apps


def closed_to(app_name: str) -> str:
    """The detail of the 403 for a token that does not open ``app_name``."""
    return f"this token does not open app {app_name!r}"


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes, before it is all read.

    A body that declares its length is refused before any of it is read (and one within the
    limit is not counted: the HTTP parser holds it to that length). One that does not
    (chunked) is counted as the application reads it: past the limit, the 413 goes out at
    once and the application is told the client went away, so what it would answer to a
    body cut short (FastAPI: 400, "There was an error parsing the body") is not sent.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on (its body counted if its length is not declared)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isascii() and declared.isdigit():
            if int(declared) > self.limit:
                await _too_large(send, self.limit)
            elif b"transfer-encoding" in headers:  # which of the two frames it is unclear
                await self._counted(scope, receive, send)
            else:  # the HTTP parser holds the body to the length it declares
                await self.app(scope, receive, send)
            return
        await self._counted(scope, receive, send)

    async def _counted(self, scope: Scope, receive: Receive, send: Send) -> None:
        seen = 0
        started = refused = False

        async def limited() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    refused = True
                    if not started:  # else the answer is on its way: the body just stops
                        await _too_large(send, self.limit)
                    return {"type": "http.disconnect"}
            return message

        async def answering(message: Message) -> None:
            nonlocal started
            if refused and not started:
                return  # the 413 went out in its place
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, limited, answering)


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps({"detail": f"request body over {limit} bytes "
                                 "(ADK_CELERY_API_MAX_BODY_BYTES)"}).encode()
    headers: list[Any] = [(b"content-type", b"application/json"),
                          (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
