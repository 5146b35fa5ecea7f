"""The threads synchronous tool functions run on, sized for the work, not for the cores.

A sync tool runs off the event loop so that it never stalls the other invocations sharing
that loop. Python's default executor (``asyncio.to_thread``) has only cores + 4 threads: on
2 cores, 8 calls of one turn (or 8 ParallelAgent branches) that each wait 0.5 s took two
waves, 1.0 s. These pools are process-wide (threads start only when needed) and sized by
the setting ``sync_tool_threads``, or for one run by ``RunConfig.tool_thread_pool_config``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator.errors import ToolExitError
from orchestrator.process_setup import core_defaults

_pools: dict[int, ThreadPoolExecutor] = {}
_lock = threading.Lock()


def tool_thread_pool(max_workers: int | None = None) -> ThreadPoolExecutor:
    """The process's pool of ``max_workers`` threads (default: the setting)."""
    size = max_workers or core_defaults().sync_tool_threads
    with _lock:
        pool = _pools.get(size)
        if pool is None:
            pool = _pools[size] = ThreadPoolExecutor(
                max_workers=size, thread_name_prefix=f"adk-celery-tool-{size}"
            )
        return pool


async def call_in_tool_thread(
    func: Callable[..., Any], kwargs: dict[str, Any], *, max_workers: int | None = None
) -> Any:
    """Call ``func(**kwargs)`` on a tool thread, with the caller's context variables.

    What it raises that is not an ``Exception`` (``sys.exit``, ``KeyboardInterrupt``) comes
    back as a :class:`~orchestrator.errors.ToolExitError`: no signal is ever delivered to a
    tool thread, so it is the tool's own.
    """
    context = contextvars.copy_context()
    call = functools.partial(context.run, _as_tool_error, func, kwargs)
    return await asyncio.get_running_loop().run_in_executor(tool_thread_pool(max_workers), call)


def _as_tool_error(func: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    try:
        return func(**kwargs)
    except Exception:
        raise
    except BaseException as error:
        raise ToolExitError(error) from error


def _forget_pools_after_fork() -> None:
    # A forked child (Celery's prefork pool) inherits the pools but not their threads.
    global _lock
    _pools.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools_after_fork)
