"""Driving an async event stream from synchronous code (``Runner.run``)."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def iterate_in_thread(start: Callable[[], AsyncIterator[T]]) -> Generator[T, None, None]:
    """Yield the items of ``start()`` here, driven on a background thread with its own loop.

    An exception the stream raises is raised here.
    """
    items: queue.Queue[Any] = queue.Queue()
    done = object()

    async def drive() -> None:
        try:
            async for item in start():
                items.put(item)
        except BaseException as error:  # re-raised on the caller's thread
            items.put(_Failure(error))
        finally:
            items.put(done)

    thread = threading.Thread(target=asyncio.run, args=(drive(),), daemon=True)
    thread.start()
    try:
        while (item := items.get()) is not done:
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        thread.join()
