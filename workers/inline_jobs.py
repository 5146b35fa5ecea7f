"""Plain sync tools' jobs run on the pool thread that took them (a latency trick).

A worker's jobs normally run on the process's one shared event loop thread: Celery's pool
thread hands the job over and waits. A job whose tool is a plain sync function (no async
tool, toolset, callback or plugin that could keep loop-bound clients) instead runs where
Celery handed it over, on that thread's own event loop with its own Redis client, and the
function is called inline (the thread waits for this job anyway): two thread hops fewer.
Switched off by ``ADK_CELERY_INLINE_SYNC_TOOLS=false``; its gain is measured by
``bench/library_tricks.py``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from config import Settings
from orchestrator.distributed.executor import is_plain_sync_tool
from orchestrator.distributed.models import ToolJob
from orchestrator.distributed.registry import AppRegistry
from orchestrator.tools.function_tool import sync_calls_inline

T = TypeVar("T")
S = TypeVar("S")


def runs_inline(settings: Settings, job: ToolJob, registry: AppRegistry) -> bool:
    """True if ``job`` runs on the calling pool thread (see the module's docstring)."""
    return settings.inline_sync_tools and is_plain_sync_tool(job, registry)


class ThreadLoops(Generic[S]):
    """An event loop and services (``S``, built by ``build`` on first use) per pool thread."""

    def __init__(self, build: Callable[[], S]) -> None:
        self._build = build
        self._here = threading.local()
        self._made: list[tuple[asyncio.AbstractEventLoop, S]] = []

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the calling thread's own loop, sync tools called inline."""
        loop = getattr(self._here, "loop", None)
        if loop is None:
            loop = self._here.loop = asyncio.new_event_loop()
        with sync_calls_inline():
            return loop.run_until_complete(coro)

    def services(self, loop: asyncio.AbstractEventLoop) -> S:
        """The services of the calling thread's ``loop`` (Redis clients belong to their loop)."""
        made: tuple[asyncio.AbstractEventLoop, S] | None = getattr(self._here, "services", None)
        if made is None or made[0] is not loop:
            made = self._here.services = (loop, self._build())
            self._made.append(made)
        return made[1]

    def close(self, close_services: Callable[[S], Coroutine[Any, Any, None]]) -> None:
        """Close the services of the loops that are idle (their threads run no job now)."""
        for loop, services in self._made:
            if not loop.is_running() and not loop.is_closed():
                loop.run_until_complete(close_services(services))
        self._made.clear()
