"""Where the core reports how long its work took, for whoever measures it (metrics).

The core knows when a model call, a tool call or an invocation's step ends, but it keeps no
metrics library: a process that wants them installs an :class:`Observer` with
:func:`set_observer` (``workers.metrics`` plugs Prometheus in). Without one, every hook is a
single ``None`` check: model streams are handed back unwrapped and tools awaited as they are.
An observer must be cheap and must not raise (its errors are logged and dropped) — it is
called on the event loop, once per model call, tool call and status change, never per
streamed chunk.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Awaitable
from typing import Protocol, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Observer(Protocol):
    """Receives the durations and outcomes the core measures."""

    def model_call(self, agent: str, seconds: float, failed: bool) -> None:
        """A model call of ``agent`` ended after ``seconds`` (its whole stream, if streamed)."""
        ...

    def tool_call(self, tool: str, seconds: float, failed: bool) -> None:
        """A call of ``tool`` ran for ``seconds`` (where it runs: a worker or in process)."""
        ...

    def invocation_status(self, app: str, status: str, created_at: float) -> None:
        """An orchestrator saved an invocation of ``app`` in ``status``.

        ``created_at``: when it was enqueued (epoch seconds; the enqueuer's clock).
        """
        ...


_observer: Observer | None = None


def set_observer(observer: Observer | None) -> None:
    """Install the process's observer (None: measure nothing)."""
    global _observer
    _observer = observer


def _report(method: str, *args: object) -> None:
    observer = _observer
    if observer is None:
        return
    try:
        getattr(observer, method)(*args)
    except Exception:  # measuring must never break the work measured
        logger.exception("Observer %s failed", method)


def timed_model_stream(agent: str, stream: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
    """``stream`` (a model's responses), timed as one model call of ``agent``.

    Only the time spent waiting for the model counts, not the time its caller holds each
    response. Without an observer, ``stream`` itself is returned.
    """
    if _observer is None:
        return stream
    return _timed_stream(agent, stream)


async def _timed_stream(agent: str, stream: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
    spent = 0.0
    failed = False
    try:
        while True:
            started = time.perf_counter()
            try:
                item = await stream.__anext__()
            except StopAsyncIteration:
                return
            except BaseException:
                failed = True
                raise
            finally:
                spent += time.perf_counter() - started
            yield item
    finally:
        await stream.aclose()
        _report("model_call", agent, spent, failed)


async def timed_tool(tool: str, call: Awaitable[T]) -> T:
    """Await ``call`` (one run of ``tool``), reporting how long it took and if it raised."""
    if _observer is None:
        return await call
    started = time.perf_counter()
    failed = True
    try:
        result = await call
        failed = False
        return result
    finally:
        _report("tool_call", tool, time.perf_counter() - started, failed)


def invocation_status(app: str, status: str, created_at: float) -> None:
    """Report that an invocation of ``app`` was saved in ``status`` (see :class:`Observer`)."""
    if _observer is not None:
        _report("invocation_status", app, status, created_at)
