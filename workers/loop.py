"""A per-process asyncio loop on a background thread, so sync Celery tasks can run coroutines."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """One event loop thread; ``run`` submits a coroutine and waits for its result."""

    def __init__(self, name: str = "adk-celery-loop") -> None:
        self._loop = asyncio.new_event_loop()
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
