"""Driving an async event stream from synchronous code (``Runner.run``)."""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")

CALLER_CLOSED_EARLY = "adk-runner-caller-closed-early"
"""The message of the cancel that ends a run whose synchronous caller stopped reading it."""


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def iterate_in_thread(start: Callable[[], AsyncIterator[T]]) -> Generator[T, None, None]:
    """Yield the items of ``start()`` here, driven on a background thread with its own loop.

    As google-adk 2.13's ``Runner.run``: the thread runs in a copy of the caller's context
    variables (a trace or a request id set by the caller reaches the run); an Exception the
    stream raises is raised here, after the items before it; any other BaseException (a
    cancel) is raised as a RuntimeError chained to it (raised as it is, it would read as this
    caller being cancelled, or end its process). A caller that stops iterating early cancels
    the run (its cleanup, such as the after-run callbacks, still runs) rather than waiting
    for it to finish unseen; nothing is raised then.
    """
    items: queue.Queue[Any] = queue.Queue()
    done = object()
    # The loop and task of the run, for a caller that closes early to cancel it.
    handle: queue.Queue[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any] | None]] = \
        queue.Queue(maxsize=1)
    closed_early = threading.Event()

    async def drive() -> None:
        handle.put((asyncio.get_running_loop(), asyncio.current_task()))
        stream = start()
        try:
            async for item in stream:
                items.put(item)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    def main() -> None:
        try:
            asyncio.run(drive())
        except BaseException as error:  # re-raised on the caller's thread
            if not (isinstance(error, asyncio.CancelledError) and closed_early.is_set()):
                items.put(_Failure(error))
        finally:
            items.put(done)

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(main,), daemon=True)
    thread.start()
    failure: BaseException | None = None
    finished = False
    try:
        while (item := items.get()) is not done:
            if isinstance(item, _Failure):
                failure = item.error
                break
            yield item
        finished = True
    finally:
        if not finished and failure is None:
            closed_early.set()
            loop, task = handle.get()
            if task is not None:
                try:
                    loop.call_soon_threadsafe(task.cancel, CALLER_CLOSED_EARLY)
                except RuntimeError:
                    pass  # the run's loop already ended: nothing left to cancel
        thread.join()
    if isinstance(failure, Exception):
        raise failure
    if failure is not None:
        raise RuntimeError(f"Agent run terminated by {type(failure).__name__}.") from failure
