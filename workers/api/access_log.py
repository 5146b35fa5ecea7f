"""uvicorn's access log (a line per request), made after the response and written a burst at a time.

uvicorn logs a request's line as its response starts, before the response's first bytes are
written, and its handler writes and flushes each line at once: one system call per request,
and on a pipe one wake-up of whatever reads it. Here the record is made one turn of the
server's event loop later (:class:`TurnDeferredLogger`), once the response has gone out, and
the handler keeps the lines of one turn and writes them together at its end, so a burst of
requests finishing together costs one write. The lines, their format and the
``uvicorn.access`` logger are uvicorn's; only when they are made and reach the stream changes.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

from uvicorn.config import LOGGING_CONFIG


class LoopBatchedStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler that writes the lines of one turn of the event loop at once.

    Outside a running event loop it writes each line at once, as StreamHandler does.
    """

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._first: logging.LogRecord | None = None
        """The first record of the lines held, to report a failed write with."""

    def emit(self, record: logging.LogRecord) -> None:
        """Hold the formatted line; the first one of a turn schedules the write."""
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        self._lines.append(line)
        if loop is None:
            self.flush()
        elif self._first is None:
            self._first = record
            loop.call_soon(self._write_held)

    def _write_held(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self.flush()

    def flush(self) -> None:
        """Write the lines held (called with the handler's lock held, or at shutdown)."""
        lines, self._lines = self._lines, []
        first, self._first = self._first, None
        if not lines:
            return
        try:
            self.stream.write("".join(lines))
            super().flush()
        except Exception:
            if first is not None:
                self.handleError(first)


ACCESS_LOGGER = "uvicorn.access"


class TurnDeferredLogger(logging.Logger):
    """A Logger whose records, logged inside a running event loop, are made at its next turn.

    uvicorn logs a request's access line as its response starts, before writing the first
    bytes of it; making the record there (the caller looked up, the record's fields filled
    in, the handlers called) made each response wait for it, some 60 us on a busy machine.
    Made one turn of the loop later, the record is the same (its ``created`` time a few
    microseconds later) and the response has gone out. A record with exception or stack
    information is made at once, while that information is there.
    """

    def _log(self, level: int, msg: object, args: Any, exc_info: Any = None,
             extra: Any = None, stack_info: bool = False, stacklevel: int = 1) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or exc_info or stack_info:
            super()._log(level, msg, args, exc_info, extra, stack_info, stacklevel)
            return
        loop.call_soon(super()._log, level, msg, args, None, extra, False, stacklevel)


def defer_access_records() -> None:
    """Make uvicorn's access logger a :class:`TurnDeferredLogger` (before uvicorn starts).

    The logger is created here with that class, as ``logging.getLogger`` creates loggers
    (uvicorn's logging set-up then configures it by name); nothing if it exists already.
    """
    previous = logging.getLoggerClass()
    logging.setLoggerClass(TurnDeferredLogger)
    try:
        logging.getLogger(ACCESS_LOGGER)
    finally:
        logging.setLoggerClass(previous)


def log_config() -> dict[str, Any]:
    """The logging set-up of uvicorn, the access log through :class:`LoopBatchedStreamHandler`."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["handlers"]["access"]["class"] = f"{__name__}.{LoopBatchedStreamHandler.__name__}"
    return config
