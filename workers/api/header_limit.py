"""A cap on the size of an HTTP request's line and headers for ``adk-celery api``.

uvicorn serves HTTP/1.1 with httptools when it is installed, and neither caps a request's
headers: uvicorn's ``h11_max_incomplete_event_size`` applies to h11 only, and httptools
keeps an unfinished header's value in memory, however long, until its line ends (the
protocol's ``on_header`` only sees finished headers). Any client, before a token is checked,
could make the server hold megabytes per connection.

A trick on uvicorn's internals (README: "Tricks on library internals"), switched off by
``ADK_CELERY_API_MAX_HEADER_BYTES=0``: :class:`HeaderLimitProtocol` is uvicorn's
``HttpToolsProtocol`` counting the bytes it is handed while a request's line and headers
are being read (from the end of the previous request to ``on_headers_complete``). Past the
limit the request is answered 431 and the connection closed. The body is not counted (its
own limit is ``ADK_CELERY_API_MAX_BODY_BYTES``).

The uvicorn internals used (:data:`UVICORN_INTERNALS`) are checked by
:func:`internals_present`; :func:`protocol_class` falls back to uvicorn's own protocol (with
a warning) when one has changed, and ``tests/test_library_internals.py`` fails loudly on
such a uvicorn.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from functools import cache
from typing import Any

logger = logging.getLogger(__name__)

UVICORN_INTERNALS: dict[str, tuple[str, ...]] = {
    "connection_made": ("transport",),
    "data_received": ("data",),
    "on_headers_complete": (),
    "on_message_complete": (),
}
"""Each method of uvicorn's ``HttpToolsProtocol`` overridden, with the parameters it takes.

``on_headers_complete`` and ``on_message_complete`` are httptools' parser callbacks, which
its parser looks up on the protocol (so the overrides are what it calls).
"""

_REFUSAL_TEXT = b"Request header fields too large."
_REFUSAL = b"".join([
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
    b"content-type: text/plain; charset=utf-8\r\n",
    b"content-length: ", str(len(_REFUSAL_TEXT)).encode("ascii"), b"\r\n",
    b"connection: close\r\n\r\n",
    _REFUSAL_TEXT,
])


def _uvicorn_protocol() -> Any:
    """The ``HttpToolsProtocol`` of uvicorn, or None without httptools."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return None
    return HttpToolsProtocol


@cache
def internals_present() -> bool:
    """True if uvicorn's httptools protocol is as this module was written against.

    Each method of :data:`UVICORN_INTERNALS` with its parameters, and ``data_received``
    handing its bytes to the parser (``self.parser.feed_data(data)``), which is what makes
    counting them before it the count of what the parser reads.
    """
    base = _uvicorn_protocol()
    if base is None:
        return False
    for name, params in UVICORN_INTERNALS.items():
        method = getattr(base, name, None)
        if method is None or list(inspect.signature(method).parameters)[1:] != list(params):
            return False
    return "self.parser.feed_data(data)" in inspect.getsource(base.data_received)


@cache
def _define() -> type[asyncio.Protocol]:
    """:class:`HeaderLimitProtocol`, defined only once uvicorn's protocol is known to import."""
    base = _uvicorn_protocol()

    class HeaderLimitProtocol(base):  # type: ignore[misc, valid-type]
        """uvicorn's httptools protocol answering 431 to a request line and headers too long."""

        max_header_bytes = 65536
        """Bytes of a request's line and headers it reads before refusing it (set by
        :func:`protocol_class`)."""
        _adk_header_bytes: int | None = 0
        """Bytes read of the current request's line and headers; None while reading a body."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            # Kept here: the refusal needs only asyncio's transport, not uvicorn's attributes.
            self._adk_transport = transport
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            counted = self._adk_header_bytes
            if counted is None:  # a body: the fast path
                super().data_received(data)
                return
            counted += len(data)
            if counted <= self.max_header_bytes:
                self._adk_header_bytes = counted
                super().data_received(data)
                return
            self._past_the_limit(data)

        def _past_the_limit(self, data: bytes) -> None:
            """Read what fits; refuse the request unless its headers end there.

            One read may hold the end of the headers and much of the body (a client writes
            them together), so the limit applies to the part before the body only.
            """
            if self._adk_transport.is_closing():
                return
            room = self.max_header_bytes - self._adk_header_bytes
            self._adk_header_bytes = self.max_header_bytes
            if room > 0:
                super().data_received(data[:room])
            if self._adk_transport.is_closing():  # uvicorn refused it (400) or answered already
                return
            if self._adk_header_bytes == self.max_header_bytes:  # still inside the headers
                logger.warning("Request line and headers over %d bytes: answered 431.",
                               self.max_header_bytes)
                self._adk_transport.write(_REFUSAL)
                self._adk_transport.close()
                return
            if self.parser.should_upgrade():  # uvicorn drops the rest of an upgrade's read too
                return
            self.data_received(data[room:])  # a body, or the next request (counted again)

        def on_headers_complete(self) -> None:
            self._adk_header_bytes = None
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._adk_header_bytes = 0  # the next request's line and headers
            super().on_message_complete()

    return HeaderLimitProtocol


def protocol_class(max_header_bytes: int) -> type[asyncio.Protocol] | str:
    """What to pass uvicorn as ``http=``: a protocol capping headers at ``max_header_bytes``.

    0: ``"auto"``, uvicorn's own choice, uncapped. ``"auto"`` too, with a warning, when
    uvicorn's httptools protocol is missing or changed (see :func:`internals_present`).
    """
    if max_header_bytes <= 0:
        return "auto"
    if not internals_present():
        logger.warning("uvicorn's httptools protocol is missing or not as expected: request "
                       "headers are not limited (ADK_CELERY_API_MAX_HEADER_BYTES); see "
                       "workers/api/header_limit.py")
        return "auto"
    return type("HeaderLimitProtocol", (_define(),), {"max_header_bytes": max_header_bytes})
