"""The callback chain around one tool call: plugins first, then the agent's callbacks.

One code path for every place a tool runs: the orchestrator (or any in-process run) and a
worker running a remote call. For each kind of callback the app's plugins are asked first,
in registration order; the first one that returns something other than None answers and
the agent's callbacks of that kind are skipped. Otherwise the agent's callbacks run, until
one returns something other than None.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from orchestrator.agents import callbacks as cb
from orchestrator.errors import ToolExitError, raised_by_service

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.llm_agent import LlmAgent
    from orchestrator.tools.base_tool import BaseTool

logger = logging.getLogger(__name__)


async def _first_answer(plugins: Awaitable[Any], callbacks: Any, args: dict[str, Any]) -> Any:
    """The plugins' answer (``plugins``, awaited), else the first of the agent's callbacks'."""
    result = await plugins
    if result is None and callbacks:
        result = await cb.run_until(callbacks, args, stop=cb.is_not_none)
    return result


async def before_tool(
    ctx: InvocationContext, agent: LlmAgent, tool: BaseTool, args: dict[str, Any],
    tool_context: ToolContext,
) -> Any:
    """The result a before-tool callback answers the call with (the tool is skipped), or None."""
    return await _first_answer(
        ctx.plugin_manager.run_before_tool_callback(
            tool=tool, tool_args=args, tool_context=tool_context),
        agent.before_tool_callback,
        {"tool": tool, "args": args, "tool_context": tool_context})


async def on_tool_error(
    ctx: InvocationContext, agent: LlmAgent, tool: BaseTool, args: dict[str, Any],
    tool_context: ToolContext, error: Exception,
) -> Any:
    """The result an error callback recovers the failed call with, or None."""
    return await _first_answer(
        ctx.plugin_manager.run_on_tool_error_callback(
            tool=tool, tool_args=args, tool_context=tool_context, error=error),
        agent.on_tool_error_callback,
        {"tool": tool, "args": args, "tool_context": tool_context, "error": error})


async def after_tool(
    ctx: InvocationContext, agent: LlmAgent, tool: BaseTool, args: dict[str, Any],
    tool_context: ToolContext, result: Any,
) -> Any:
    """The replacement of ``result`` an after-tool callback gives, or None."""
    return await _first_answer(
        ctx.plugin_manager.run_after_tool_callback(
            tool=tool, tool_args=args, tool_context=tool_context, result=result),
        agent.after_tool_callback,
        {"tool": tool, "args": args, "tool_context": tool_context, "tool_response": result})


async def call_tool(
    ctx: InvocationContext, agent: LlmAgent, tool: BaseTool, args: dict[str, Any],
    tool_context: ToolContext, invoke: Callable[[], Awaitable[Any]],
) -> Any:
    """Run one call through its callbacks and return the result the model will see.

    Before-tool callbacks first (an answer skips ``invoke``); then ``invoke()``, whose
    exception goes to the error callbacks (no recovery: it propagates; one that is not an
    ``Exception`` as a :class:`~orchestrator.errors.ToolExitError`); then the after-tool
    callbacks, which may replace whatever result there is. A cancelled call tells every
    error callback (for clean-up; what they return is ignored) and stays cancelled.
    """
    result = await before_tool(ctx, agent, tool, args, tool_context)
    if result is None:
        try:
            result = await invoke()
        except asyncio.CancelledError as cancelled:
            await _tell_cancelled(ctx, agent, tool, args, tool_context, cancelled)
            raise
        except BaseException as raised:
            error = as_tool_error(raised)
            if raised_by_service(error):
                raise  # the infrastructure failed, not the tool: it runs again, unreported
            result = await on_tool_error(ctx, agent, tool, args, tool_context, error)
            if result is None:
                if error is raised:
                    raise
                raise error from raised
    replaced = await after_tool(ctx, agent, tool, args, tool_context, result)
    return result if replaced is None else replaced


def as_tool_error(raised: BaseException) -> Exception:
    """What the tool raised, as the tool's error (an ``Exception``).

    ``sys.exit`` in a tool (argparse, click), a ``KeyboardInterrupt`` or ``GeneratorExit`` it
    raises would otherwise end the event loop running it: they become a
    :class:`~orchestrator.errors.ToolExitError`. A ``KeyboardInterrupt`` caught on the main
    thread is re-raised: it may be the user's Ctrl-C (Python delivers signals there), which
    stops the program as it would without us. A sync tool's comes from its tool thread,
    where no signal lands, already wrapped.
    """
    if isinstance(raised, Exception):
        return raised
    if isinstance(raised, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
        raise raised
    return ToolExitError(raised)


async def _tell_cancelled(
    ctx: InvocationContext, agent: LlmAgent, tool: BaseTool, args: dict[str, Any],
    tool_context: ToolContext, cancelled: asyncio.CancelledError,
) -> None:
    """Every error callback hears of the cancellation; none can stop it or raise into it."""
    callbacks: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
        (plugin.name, plugin.on_tool_error_callback,
         {"tool": tool, "tool_args": args, "tool_context": tool_context, "error": cancelled})
        for plugin in ctx.plugin_manager.plugins
    ]
    callbacks += [
        (getattr(fn, "__name__", repr(fn)), fn,
         {"tool": tool, "args": args, "tool_context": tool_context, "error": cancelled})
        for fn in cb.as_list(agent.on_tool_error_callback)
    ]
    for name, fn, arguments in callbacks:
        try:
            await cb.call(fn, arguments)
        except (Exception, asyncio.CancelledError):
            logger.exception("on_tool_error_callback %r raised while tool %r was cancelled",
                             name, tool.name)
