"""Limits on receiving an HTTP request for ``adk-celery api``: its head's size and its time.

uvicorn serves HTTP/1.1 with httptools when it is installed, and neither caps a request's
headers: uvicorn's ``h11_max_incomplete_event_size`` applies to h11 only, and httptools
keeps an unfinished header's value in memory, however long, until its line ends (the
protocol's ``on_header`` only sees finished headers). Any client, before a token is checked,
could make the server hold megabytes per connection. Nor does uvicorn time out a client that
is slow to send a request: its keep-alive timeout runs only after a response and any byte
received stops it, so a client that connects and sends nothing, or trickles its headers or
its body a byte at a time, holds its connection for ever (slowloris).

A trick on uvicorn's internals (README: "Tricks on library internals"): :class:`HeaderLimitProtocol`
is uvicorn's ``HttpToolsProtocol`` that

- counts the bytes it is handed while a request's line and headers are being read (from the
  end of the previous request to ``on_headers_complete``); past ``ADK_CELERY_API_MAX_HEADER_BYTES``
  the request is answered 431 and the connection closed. The body is not counted (its own
  limit is ``ADK_CELERY_API_MAX_BODY_BYTES``);
- closes a connection whose request line and headers have not all arrived
  ``ADK_CELERY_API_HEADER_TIMEOUT_SECONDS`` after it opened, or after the previous response
  on it was complete (answered 408 if part of a request came, closed without a word if none
  did: a client may open a connection ahead of its request, and an unasked 408 on a kept
  connection can be taken for the answer to a request sent just then);
- answers 408 and closes a request whose body has not all arrived
  ``ADK_CELERY_API_BODY_TIMEOUT_SECONDS`` after its headers did (or after it was taken up,
  for a request pipelined behind another one, whose body uvicorn does not read before); just
  closes if the request was answered already.

The time a response takes is never counted: no deadline runs while a response is being
sent, however long it streams (a ``/run``, an SSE follow), as long as the client reads it.
Two more limits close a connection whose client makes the server hold what it does not take:

- more than :data:`MAX_PIPELINED` requests waiting behind the one being answered (HTTP/1.1
  pipelining): uvicorn queues every complete request of each read, and reads again each
  time a response is done, so a client that sends requests without reading the answers
  made it hold hundreds of megabytes per connection, before any token was checked;
- a response that could not be written for ``ADK_CELERY_API_SEND_TIMEOUT_SECONDS``: the
  client stopped reading (the transport's buffer stayed over its high-water mark).

Each limit is switched off by 0 (the pipelining cap comes with any of them); with all four
off, uvicorn's own protocol serves.

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
    "connection_lost": ("exc",),
    "data_received": ("data",),
    "on_message_begin": (),
    "on_headers_complete": (),
    "on_message_complete": (),
    "on_response_complete": (),
    "pause_writing": (),
    "resume_writing": (),
}
"""Each method of uvicorn's ``HttpToolsProtocol`` overridden, with the parameters it takes.

``on_message_begin``, ``on_headers_complete`` and ``on_message_complete`` are httptools'
parser callbacks, which its parser looks up on the protocol (so the overrides are what it
calls); ``on_response_complete`` is what uvicorn's request cycle calls once a response is
all written (see :func:`internals_present` for the attributes read); ``pause_writing`` and
``resume_writing`` are asyncio's flow control, which uvicorn passes on to its cycles.
"""

MAX_PIPELINED = 16
"""Requests a connection may have waiting behind the one being answered; past it, closed."""


def _answer(status: bytes, text: bytes) -> bytes:
    return b"".join([
        b"HTTP/1.1 ", status, b"\r\n",
        b"content-type: text/plain; charset=utf-8\r\n",
        b"content-length: ", str(len(text)).encode("ascii"), b"\r\n",
        b"connection: close\r\n\r\n",
        text,
    ])


_REFUSAL = _answer(b"431 Request Header Fields Too Large", b"Request header fields too large.")
_NOT_NOW = _answer(b"503 Service Unavailable", b"Too many pipelined requests.")
_TIMED_OUT = _answer(b"408 Request Timeout", b"Request not received in time.")


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

    Each method of :data:`UVICORN_INTERNALS` with its parameters; ``data_received`` handing
    its bytes to the parser (``self.parser.feed_data(data)``), which is what makes counting
    them before it the count of what the parser reads; a request's cycle made with
    ``on_response=self.on_response_complete`` and keeping ``response_started`` and
    ``response_complete``, and pipelined requests queued in ``self.pipeline``, which is what
    tells the deadlines whether a response is being sent.
    """
    base = _uvicorn_protocol()
    if base is None:
        return False
    for name, params in UVICORN_INTERNALS.items():
        method = getattr(base, name, None)
        if method is None or list(inspect.signature(method).parameters)[1:] != list(params):
            return False
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    cycle = inspect.getsource(RequestResponseCycle.__init__)
    return ("self.parser.feed_data(data)" in inspect.getsource(base.data_received)
            and "on_response=self.on_response_complete" in inspect.getsource(base.on_headers_complete)
            and "self.pipeline" in inspect.getsource(base.on_response_complete)
            and "self.response_started" in cycle and "self.response_complete" in cycle)


class _RequestLimits:
    """What :class:`HeaderLimitProtocol` adds to uvicorn's httptools protocol.

    A cap on a request's head and deadlines on receiving it; a mixin, whose ``super()`` is
    uvicorn's protocol.
    """

    max_header_bytes = 65536
    """Bytes of a request's line and headers it reads before refusing it; 0: no limit (set
    by :func:`protocol_class`, as are the two deadlines)."""
    header_timeout = 0.0
    """Seconds a request's line and headers may take to arrive; 0: no limit."""
    body_timeout = 0.0
    """Seconds a request's body may take to arrive once its headers have; 0: no limit."""
    send_timeout = 0.0
    """Seconds a response may wait for its client to read before the connection is closed;
    0: no limit."""
    _adk_header_bytes: int | None = 0
    """Bytes read of the current request's line and headers; None while reading a body."""
    _adk_head_begun = False
    """Part of a request's head has arrived (httptools began a message) and not all of it."""
    _adk_body_due = False
    """The latest request's headers have arrived and not all of its body."""
    _adk_deadline: asyncio.TimerHandle | None = None
    """The deadline running, of a request's head or of its body (never both at once)."""
    _adk_send_deadline: asyncio.TimerHandle | None = None
    """The deadline of a response its client does not read (while writing is paused)."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        # Kept here: the refusals need only asyncio's transport, not uvicorn's attributes.
        self._adk_transport = transport
        self._adk_loop = asyncio.get_running_loop()
        super().connection_made(transport)
        self._adk_await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._adk_disarm()
        self._adk_send_disarm()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.send_timeout and self._adk_send_deadline is None:
            self._adk_send_deadline = self._adk_loop.call_later(self.send_timeout,
                                                                self._adk_send_late)

    def resume_writing(self) -> None:
        self._adk_send_disarm()
        super().resume_writing()

    def data_received(self, data: bytes) -> None:
        counted = self._adk_header_bytes
        if counted is None or not self.max_header_bytes:  # a body, or no limit: the fast path
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

    def on_message_begin(self) -> None:
        self._adk_head_begun = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        if self._adk_transport.is_closing():
            return  # hung up (the rest of the read is parsed still): no request taken
        self._adk_header_bytes = None
        self._adk_head_begun = False
        self._adk_disarm()  # the head's deadline
        # Read before uvicorn replaces it: is a response of this connection being sent?
        idle = self.cycle is None or self.cycle.response_complete
        super().on_headers_complete()
        if len(self.pipeline) > MAX_PIPELINED:
            logger.warning("More than %d pipelined requests waiting on one connection: closed.",
                           MAX_PIPELINED)
            self.pipeline.clear()  # never started: nothing of them is held any more
            self._adk_hang_up(_NOT_NOW if idle else None)
            return
        if self.parser.should_upgrade():  # the connection may be handed to a WebSocket
            return
        self._adk_body_due = True
        if idle:  # else pipelined: its body is not read (nor timed) before it is taken up
            self._adk_await_body()

    def on_message_complete(self) -> None:
        self._adk_header_bytes = 0  # the next request's line and headers
        self._adk_head_begun = False
        self._adk_body_due = False
        self._adk_disarm()  # the body's deadline
        super().on_message_complete()
        if self.cycle is not None and self.cycle.response_complete:  # answered before its body was all in
            self._adk_await_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._adk_transport.is_closing() or self.pipeline:
            return  # closed, or a pipelined request's response is being sent now
        if self._adk_body_due:  # the latest request: taken up now, or answered before its body
            if self._adk_deadline is None:
                self._adk_await_body()
        elif self.cycle.response_complete:  # not the pipelined request taken up just now
            self._adk_await_head()

    def _adk_await_head(self) -> None:
        if self.header_timeout:
            self._adk_disarm()
            self._adk_deadline = self._adk_loop.call_later(self.header_timeout,
                                                           self._adk_head_late)

    def _adk_await_body(self) -> None:
        if self.body_timeout:
            self._adk_disarm()
            self._adk_deadline = self._adk_loop.call_later(self.body_timeout,
                                                           self._adk_body_late)

    def _adk_disarm(self) -> None:
        if self._adk_deadline is not None:
            self._adk_deadline.cancel()
            self._adk_deadline = None

    def _adk_head_late(self) -> None:
        self._adk_deadline = None
        if not self._adk_head_begun:  # idle: nothing of a request came
            self._adk_hang_up(None)
            return
        logger.warning("Request line and headers not in after %g s: answered 408.",
                       self.header_timeout)
        self._adk_hang_up(_TIMED_OUT)

    def _adk_body_late(self) -> None:
        self._adk_deadline = None
        answered = self.cycle is not None and self.cycle.response_started
        logger.warning("Request body not in after %g s: %s.", self.body_timeout,
                       "connection closed" if answered else "answered 408")
        self._adk_hang_up(None if answered else _TIMED_OUT)

    def _adk_send_disarm(self) -> None:
        if self._adk_send_deadline is not None:
            self._adk_send_deadline.cancel()
            self._adk_send_deadline = None

    def _adk_send_late(self) -> None:
        self._adk_send_deadline = None
        logger.warning("A response not read by its client for %g s: connection closed.",
                       self.send_timeout)
        transport = self._adk_transport
        if not transport.is_closing() and transport.get_protocol() is self:
            transport.abort()  # what is still buffered would never be read

    def _adk_hang_up(self, answer: bytes | None) -> None:
        transport = self._adk_transport
        if transport.is_closing() or transport.get_protocol() is not self:  # a WebSocket's now
            return
        if answer is not None:
            transport.write(answer)
        transport.close()  # after what is written: the end of a response the client still reads


@cache
def _define() -> type[asyncio.Protocol]:
    """:class:`HeaderLimitProtocol`, defined only once uvicorn's protocol is known to import."""
    return type("HeaderLimitProtocol", (_RequestLimits, _uvicorn_protocol()), {
        "__doc__": "uvicorn's httptools protocol with a cap on a request's head and deadlines "
                   "on receiving it."})


def protocol_class(max_header_bytes: int, header_timeout: float = 0.0,
                   body_timeout: float = 0.0, send_timeout: float = 0.0
                   ) -> type[asyncio.Protocol] | str:
    """What to pass uvicorn as ``http=``: a protocol with the limits of this module.

    It caps a request's line and headers at ``max_header_bytes`` and the requests pipelined
    on a connection at :data:`MAX_PIPELINED`, times out requests whose head
    (``header_timeout``) or body (``body_timeout``) is slow to arrive, and responses whose
    client does not read them (``send_timeout``), in seconds.

    All four 0: ``"auto"``, uvicorn's own choice, without limits. ``"auto"`` too, with a
    warning, when uvicorn's httptools protocol is missing or changed (see
    :func:`internals_present`).
    """
    if max_header_bytes <= 0 and header_timeout <= 0 and body_timeout <= 0 and send_timeout <= 0:
        return "auto"
    if not internals_present():
        missing = []
        if max_header_bytes > 0:
            missing.append("request headers are not limited (ADK_CELERY_API_MAX_HEADER_BYTES)")
        if header_timeout > 0 or body_timeout > 0 or send_timeout > 0:
            missing.append("slow requests and unread responses are not timed out "
                           "(ADK_CELERY_API_HEADER_TIMEOUT_SECONDS, ADK_CELERY_API_BODY_TIMEOUT_SECONDS, "
                           "ADK_CELERY_API_SEND_TIMEOUT_SECONDS), nor pipelining capped")
        logger.warning("uvicorn's httptools protocol is missing or not as expected: %s; see "
                       "workers/api/header_limit.py", "; ".join(missing))
        return "auto"
    return type("HeaderLimitProtocol", (_define(),), {
        "max_header_bytes": max(max_header_bytes, 0), "header_timeout": max(header_timeout, 0.0),
        "body_timeout": max(body_timeout, 0.0), "send_timeout": max(send_timeout, 0.0)})
