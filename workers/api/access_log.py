"""uvicorn's access log (a line per request), written a burst at a time.

uvicorn's own handler writes and flushes each line as the response starts: one system call
per request, and on a pipe one wake-up of whatever reads it. This handler keeps the lines
logged in one turn of the server's event loop and writes them together at its end, so a
burst of requests finishing together costs one write. The lines, their format and the
``uvicorn.access`` logger are uvicorn's; only when they reach the stream changes.
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


def log_config() -> dict[str, Any]:
    """The logging set-up of uvicorn, the access log through :class:`LoopBatchedStreamHandler`."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["handlers"]["access"]["class"] = f"{__name__}.{LoopBatchedStreamHandler.__name__}"
    return config
