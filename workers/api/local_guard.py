"""What keeps other web pages away from a token-less API that serves the dev UI.

Without ``ADK_CELERY_API_TOKENS`` the server has no authentication and listens on loopback
only, but a browser on the same machine can still be made to call it: by a page of another
site (cross-site requests) or through a domain name that resolves to 127.0.0.1 (DNS
rebinding). With the dev UI on, such a server answers only requests whose ``Host`` is a
loopback name and whose ``Origin``, when a browser sends one, is the server itself or one of
``ADK_CELERY_API_CORS_ORIGINS``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from workers.addresses import is_loopback


def host_name(host: str) -> str:
    """The name or address of a ``Host`` header, without its port or IPv6 brackets."""
    parsed = urlsplit(f"//{host}")
    try:
        return parsed.hostname or ""
    except ValueError:
        return ""


class SameOriginGuard:
    """ASGI middleware: 403 for a request from another site or through a non-loopback name."""

    def __init__(self, app: ASGIApp, allowed_origins: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = frozenset(allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on if it may come in."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or []}
        host = headers.get("host", "")
        origin = headers.get("origin")
        problem = None
        if not is_loopback(host_name(host)):
            problem = f"Host {host!r} is not a loopback name"
        elif origin is not None and origin not in self.allowed and urlsplit(origin).netloc != host:
            problem = f"Origin {origin!r} is another site"
        if problem is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"detail": f"{problem}: without ADK_CELERY_API_TOKENS this server "
                                     "only answers its own pages on a loopback address"}).encode()
        await send({"type": "http.response.start", "status": 403, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
