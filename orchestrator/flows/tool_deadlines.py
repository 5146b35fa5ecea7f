"""Deadlines of the tool calls a ParallelAgent branch makes inside its job on a worker.

A tool job (a remote tool call) is answered by the orchestrators' watchdog at its deadline.
A branch that runs on a worker runs as one job, its tools in process there, where no
watchdog looks: so there each call gets the deadline a tool job of its tool would get (its
``adk_celery_timeout`` metadata, else the worker's ``tool_timeout_seconds``, handed in as
:attr:`InvocationContext.tool_timeout_seconds`), counted from the call's start. At the
deadline the call is answered with the watchdog's timeout error, offered first to the
on_tool_error callbacks as the orchestrator offers a tool job's (a
:class:`~orchestrator.errors.RemoteToolError`); the branch's model reads the answer and
goes on. An async tool is cancelled; a sync tool on its thread cannot be stopped, so it is
no longer waited for. Nothing the call did counts: its answer carries fresh actions, its
writes to ``tool_context.state`` are undone and later ones dropped, and its late result is
never seen (artifacts it saved stay saved, as a tool job's do). Tools the orchestrator runs
in process, and the branch job itself, have no deadline.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from orchestrator.agents.context import ToolContext
from orchestrator.distributed.transport import call_policy, effective_timeout, timeout_error
from orchestrator.errors import RemoteToolError
from orchestrator.flows import tool_callbacks
from orchestrator.sessions.state import State
from orchestrator.tools.tool_confirmation import ToolConfirmation

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.llm_agent import LlmAgent
    from orchestrator.tools.base_tool import BaseTool

logger = logging.getLogger(__name__)

_ABSENT = object()
_let_go: set[asyncio.Task[Any]] = set()
"""Calls past their deadline, cancelled but maybe not ended yet (kept until they end)."""


class _SealableState(State):
    """One call's view of the session state, whose writes can be taken back (:meth:`seal`)."""

    def __init__(self, value: dict[str, Any], delta: dict[str, Any]) -> None:
        super().__init__(value, delta)
        self._lock = threading.Lock()  # a sync tool writes from its own thread
        self._before: dict[str, Any] = {}
        self._sealed = False

    def __setitem__(self, key: str, value: Any) -> None:
        with self._lock:
            if self._sealed:
                return
            self._before.setdefault(key, self._value.get(key, _ABSENT))
            super().__setitem__(key, value)

    def seal(self) -> None:
        """Drop every later write; undo this call's writes that nothing overwrote since.

        A container this call read from the state and changed in place is put back as it
        was read, as a new object: the tool, if it still runs, changes only its own.
        """
        with self._lock:
            self._sealed = True
            for key, before in self._before.items():
                if self._value.get(key, _ABSENT) is not self._delta.get(key, _ABSENT):
                    continue  # another call wrote it since: its value stays
                if before is _ABSENT:
                    del self._value[key]
                else:
                    self._value[key] = before
            for key, (handed_out, _) in list(self._handed_out.items()):
                if key not in self._before and self._value.get(key, _ABSENT) is handed_out \
                        and self.changed_since_read(key):
                    self._value[key] = self.value_when_read(key)


class _DeadlineToolContext(ToolContext):
    """A ToolContext whose state writes are undone if its call misses its deadline."""

    def __init__(self, invocation_context: InvocationContext, *, function_call_id: str | None,
                 tool_confirmation: ToolConfirmation | None) -> None:
        super().__init__(invocation_context, function_call_id=function_call_id,
                         tool_confirmation=tool_confirmation)
        self._sealable = _SealableState(invocation_context.session.state, self.actions.state_delta)
        self._state = self._sealable

    def seal(self) -> None:
        """Nothing this context wrote to the state counts any more (see :class:`_SealableState`)."""
        self._sealable.seal()


class CallDeadline:
    """The deadline of one tool call made inside a branch job, and the call run against it."""

    def __init__(self, ctx: InvocationContext, tool: BaseTool, seconds: float) -> None:
        self.seconds = seconds
        self._ctx = ctx
        self._tool = tool
        self._context: _DeadlineToolContext | None = None

    @classmethod
    def of(cls, ctx: InvocationContext, tool: BaseTool | None) -> CallDeadline | None:
        """The deadline of a call of ``tool``; None outside a branch job or with no timeout."""
        if tool is None or ctx.tool_timeout_seconds is None:
            return None
        seconds = effective_timeout(call_policy(tool)["timeout_seconds"], ctx.tool_timeout_seconds)
        return None if seconds is None else cls(ctx, tool, seconds)

    def tool_context(
        self, function_call_id: str | None, tool_confirmation: ToolConfirmation | None
    ) -> ToolContext:
        """The ToolContext of the call (its state writes are undone if it times out)."""
        self._context = _DeadlineToolContext(
            self._ctx, function_call_id=function_call_id, tool_confirmation=tool_confirmation)
        return self._context

    async def call(
        self, agent: LlmAgent, args: dict[str, Any], invoke: Callable[[], Awaitable[Any]]
    ) -> tuple[Any, ToolContext]:
        """Run the call through its callbacks, as :func:`tool_callbacks.call_tool` does.

        Returns its result and the context whose actions go with the answer: the call's own,
        or, past the deadline, a fresh one with the timeout error (or what an on_tool_error
        callback recovered it with). Call :meth:`tool_context` first.
        """
        context = self._context
        assert context is not None, "CallDeadline.tool_context() makes the call's context"
        ctx, tool = self._ctx, self._tool
        task = asyncio.ensure_future(tool_callbacks.call_tool(ctx, agent, tool, args, context, invoke))
        try:
            done, _ = await asyncio.wait({task}, timeout=self.seconds)
        except asyncio.CancelledError:
            task.cancel()  # the branch is stopped: its call ends with it, as without a deadline
            await asyncio.wait({task})
            raise
        if done:
            return task.result(), context
        context.seal()
        task.cancel()  # an async tool stops; a sync tool's thread runs on, no longer awaited
        _let_go.add(task)
        task.add_done_callback(_forget)
        message = timeout_error(tool.name, self.seconds)
        logger.warning("Call %s of invocation %s (branch %s): %s", context.function_call_id,
                       ctx.invocation_id, ctx.branch, message)
        answer = ToolContext(ctx, function_call_id=context.function_call_id)
        recovered = await tool_callbacks.on_tool_error(
            ctx, agent, tool, args, answer, RemoteToolError(message))
        return ({"error": message} if recovered is None else recovered), answer


def _forget(task: asyncio.Task[Any]) -> None:
    _let_go.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: an error of a call already answered is not news
