"""A per-process asyncio loop on a background thread, so sync Celery tasks can run coroutines."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
logger = logging.getLogger(__name__)


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


class LoopThreadDeadError(RuntimeError):
    """The process's loop thread is gone: nothing handed to it would ever run.

    An infrastructure failure, never a tool's: a job that meets it goes back to its queue.
    """


class LoopExitError(RuntimeError):
    """A coroutine run by :meth:`LoopThread.run` raised what is not an ``Exception``.

    ``SystemExit``, ``KeyboardInterrupt`` or ``GeneratorExit`` from code on the loop thread
    (no signal is delivered there: it is that code's). Raised to the caller as this error
    instead: left as it is, asyncio re-raises it out of the loop, ending the thread, and the
    caller (a Celery pool thread) hands it to code that only expects an ``Exception``.
    """


class LoopThread:
    """One event loop thread; ``run`` submits a coroutine and waits for its result.

    The loop outlives anything raised on it: an exception that escapes a callback or a task
    (asyncio lets ``SystemExit`` and ``KeyboardInterrupt`` out of ``run_forever``) is logged
    and the loop runs on. Only :meth:`stop` ends it.
    """

    def __init__(self, name: str = "adk-celery-loop", *, use_uvloop: bool = True) -> None:
        self._loop = new_loop(use_uvloop)
        self._pid = os.getpid()
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                self._loop.run_forever()
            except BaseException:  # noqa: BLE001  (anything: the loop must go on)
                if self._stopping:
                    return
                logger.exception("Something on the event loop raised past it; the loop goes on")
                continue
            return  # stopped

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop."""
        return self._loop

    @property
    def forked(self) -> bool:
        """True in a child process forked after the thread started (the thread is gone)."""
        return os.getpid() != self._pid

    @property
    def alive(self) -> bool:
        """True while the loop thread runs (in this process) and can take coroutines."""
        return not self.forked and self._thread.is_alive() and not self._loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop thread and return its result (re-raising its error).

        What it raises that is not an ``Exception`` comes as a :class:`LoopExitError`. Raises
        :class:`LoopThreadDeadError` at once if the loop thread is gone, or as soon as it is
        found gone while waiting, instead of waiting for ever.
        """
        if not self.alive:
            coro.close()
            raise LoopThreadDeadError(_DEAD)
        future = asyncio.run_coroutine_threadsafe(_guarded(coro), self._loop)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = _LOOK_EVERY if deadline is None else max(
                0.0, min(_LOOK_EVERY, deadline - time.monotonic()))
            try:
                return future.result(wait)
            except concurrent.futures.TimeoutError:
                if future.done():
                    raise  # the coroutine's own TimeoutError
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                if not self.alive:
                    future.cancel()
                    raise LoopThreadDeadError(_DEAD) from None
            except (Exception, concurrent.futures.CancelledError):
                raise
            except BaseException as error:
                if future.done() and not future.cancelled() and future.exception() is error:
                    raise LoopExitError(_described(error)) from error  # the coroutine's
                raise  # this thread's own (a signal: Celery's solo pool stopping)

    def stop(self) -> None:
        """Stop the loop and wait for the thread."""
        self._stopping = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


_LOOK_EVERY = 1.0
"""How often a caller waiting on the loop checks that its thread is still there (seconds)."""

_DEAD = "this process's event loop thread is not running: the work cannot run here"


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


async def _guarded(coro: Coroutine[Any, Any, T]) -> T:
    # Not GeneratorExit: that is also what closing this coroutine throws into it.
    try:
        return await coro
    except (SystemExit, KeyboardInterrupt) as error:  # asyncio would raise it out of the loop
        raise LoopExitError(_described(error)) from error
