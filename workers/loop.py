"""A per-process asyncio loop on a background thread, so sync Celery tasks can run coroutines."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def new_loop(use_uvloop: bool = True) -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's where it is installed and wanted, else asyncio's own.

    uvloop runs the same asyncio programs with less CPU per callback, timer and socket
    operation, which is most of what an orchestrator's loop does between Redis round trips.
    """
    if use_uvloop:
        try:
            import uvloop
        except ImportError:  # an optional speed-up (not built for every platform)
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class LoopThread:
    """One event loop thread; ``run`` submits a coroutine and waits for its result."""

    def __init__(self, name: str = "adk-celery-loop", *, use_uvloop: bool = True) -> None:
        self._loop = new_loop(use_uvloop)
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop."""
        return self._loop

    @property
    def forked(self) -> bool:
        """True in a child process forked after the thread started (the thread is gone)."""
        return os.getpid() != self._pid

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop thread and return its result (re-raising its error)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        """Stop the loop and wait for the thread."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
