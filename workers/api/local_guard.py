"""What keeps everyone but this machine's own clients away from a token-less API.

Without ``ADK_CELERY_API_TOKENS`` the server has no authentication. ``adk-celery api`` then
listens on loopback only, but that is not enough:

- an application server started another way (``uvicorn --factory`` on ``0.0.0.0``) would
  answer the network: requests from a peer that is not this machine are refused;
- a browser on this machine can be made to call the API by a page of another site
  (cross-site requests) or through a domain name that resolves to 127.0.0.1 (DNS
  rebinding): requests whose ``Host`` is not a loopback name, or whose ``Origin`` (when a
  browser sends one) is neither the server itself nor one of ``ADK_CELERY_API_CORS_ORIGINS``,
  are refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from workers.addresses import is_loopback


def host_name(host: str) -> str:
    """The name or address of a ``Host`` header, without its port or IPv6 brackets.

    "" for a header that is not a host and an optional port (``127.0.0.1:80.evil``).
    """
    parsed = urlsplit(f"//{host}")
    try:
        parsed.port  # noqa: B018 - raises ValueError for a port that is not a number
        return parsed.hostname or ""
    except ValueError:
        return ""


class LocalOnlyGuard:
    """ASGI middleware: 403 for a request from another machine, another site, or a non-loopback name."""

    def __init__(self, app: ASGIApp, allowed_origins: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = frozenset(allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on if it may come in."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host, origin, repeated = "", None, False
        for key, value in scope.get("headers") or ():
            if key == b"host":
                repeated = repeated or bool(host)
                host = value.decode("latin-1")
            elif key == b"origin":
                repeated = repeated or origin is not None
                origin = value.decode("latin-1")
        peer = scope.get("client")  # None: no network peer (a Unix socket, an in-process call)
        problem = None
        if repeated:  # which one would a proxy have read? Only one of each is valid HTTP
            problem = "more than one Host or Origin header"
        elif peer is not None and not is_loopback(peer[0]):
            problem = f"the client {peer[0]!r} is not on this machine"
        elif not is_loopback(host_name(host)):
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
                                     "only answers this machine's own clients"}).encode()
        await send({"type": "http.response.start", "status": 403, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
