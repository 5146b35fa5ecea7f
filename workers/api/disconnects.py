"""A request's work, given up once its client has gone away (``/run``, both of its doors)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.types import Receive

T = TypeVar("T")


async def unless_gone(work: Awaitable[T], receive: Receive) -> T | None:
    """``work``'s result, or None once the client has gone away (``work`` is cancelled).

    A ``/run`` follows its invocation until it ends or pauses, which may be long: a client
    that gave up must not keep it (and the server, which waits for it as it stops) busy. The
    invocation itself goes on: the orchestrators run it, not this request. ``receive``: the
    request's, its body read whole before.
    """
    answer = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnect(receive))
    try:
        await asyncio.wait((answer, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if answer.done():
        return answer.result()
    answer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await answer
    return None


async def _disconnect(receive: Receive) -> None:
    """Return when the client has gone away (the body was read whole before)."""
    while (await receive())["type"] != "http.disconnect":
        pass
