"""ReflectAndRetryToolPlugin: a failed tool call becomes guidance for the model to try again."""

from __future__ import annotations

import asyncio
import enum
import json
import threading
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from orchestrator.plugins.base_plugin import BasePlugin

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext
    from orchestrator.tools.base_tool import BaseTool

REFLECT_AND_RETRY_RESPONSE_TYPE = "ERROR_HANDLED_BY_REFLECT_AND_RETRY_PLUGIN"
"""``response_type`` of the answers this plugin gives in place of a failed call."""
GLOBAL_SCOPE_KEY = "__global_reflect_and_retry_scope__"
"""The counting scope of ``TrackingScope.GLOBAL``."""


class TrackingScope(enum.Enum):
    """Over what consecutive failures are counted."""

    INVOCATION = "invocation"
    """Each invocation counts its own (the default)."""
    GLOBAL = "global"
    """One count per tool for everything this plugin instance sees."""


class ToolFailureResponse(BaseModel):
    """The answer the model gets instead of a failed call: what failed, and what to do."""

    response_type: str = REFLECT_AND_RETRY_RESPONSE_TYPE
    error_type: str = ""
    error_details: str = ""
    retry_count: int = 0
    reflection_guidance: str = ""


class ReflectAndRetryToolPlugin(BasePlugin):
    """Turns a tool's exception into an answer that asks the model to reflect and retry.

    Each failure of a tool raises its count of consecutive failures (per invocation by
    default, see ``TrackingScope``); a success resets that tool's count. Up to
    ``max_retries`` failures the model is answered with a ``ToolFailureResponse`` carrying
    the error and guidance; past that, the exception is raised again
    (``throw_exception_if_retry_exceeded``, the default) or the model is told to stop using
    the tool. Results that report a failure without raising can be counted too: override
    ``extract_error_from_result``.

    Counts live in the memory of the process running the tool. For a tool routed to
    workers that is each worker process: retries of one invocation that land on different
    workers are counted apart.
    """

    def __init__(
        self,
        name: str = "reflect_retry_tool_plugin",
        max_retries: int = 3,
        throw_exception_if_retry_exceeded: bool = True,
        tracking_scope: TrackingScope = TrackingScope.INVOCATION,
    ) -> None:
        super().__init__(name)
        if max_retries < 0:
            raise ValueError(f"max_retries must be a non-negative integer, got {max_retries}.")
        self.max_retries = max_retries
        """Consecutive failures answered with guidance before giving up (0: none)."""
        self.throw_exception_if_retry_exceeded = throw_exception_if_retry_exceeded
        """Past ``max_retries``: raise the error (True) or answer that the tool is out (False)."""
        self.scope = tracking_scope
        """Over what failures are counted."""
        self._failures: dict[str, dict[str, int]] = {}
        # Tools may run on several threads and loops (workers): a thread lock, held briefly.
        self._lock = threading.Lock()

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: Any,
    ) -> dict[str, Any] | None:
        """Count an error found in the result, or reset the tool's count on success."""
        if isinstance(result, dict) and result.get("response_type") == REFLECT_AND_RETRY_RESPONSE_TYPE:
            return None  # our own answer to an exception: already counted
        error = await self.extract_error_from_result(
            tool=tool, tool_args=tool_args, tool_context=tool_context, result=result
        )
        if error:
            return await self._handle_tool_error(tool, tool_args, tool_context, error)
        await self._reset_failures_for_tool(tool_context, tool.name)
        return None

    async def extract_error_from_result(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: Any,
    ) -> dict[str, Any] | None:
        """The error a successful result reports, if any (override; by default none)."""
        return None

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        """Answer a tool's exception with guidance (a cancellation is left alone)."""
        if isinstance(error, asyncio.CancelledError):
            return None
        return await self._handle_tool_error(tool, tool_args, tool_context, error)

    def _get_scope_key(self, tool_context: ToolContext) -> str:
        """The counting scope of a call; override to count per user or per session."""
        if self.scope is TrackingScope.GLOBAL:
            return GLOBAL_SCOPE_KEY
        if not tool_context.invocation_id:
            raise ValueError("The INVOCATION tracking scope needs the call's invocation id.")
        return tool_context.invocation_id

    # The steps below have google-adk's names and signatures, so that a subclass written
    # for its plugin (overriding how an answer reads, say) works here the same way.

    async def _handle_tool_error(
        self, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Any
    ) -> dict[str, Any]:
        """Count a failure of ``tool`` and answer it: guidance, or give up past the limit."""
        if self.max_retries == 0:
            return self._give_up(tool, tool_args, error)
        scope = self._get_scope_key(tool_context)
        with self._lock:
            counts = self._failures.setdefault(scope, {})
            counts[tool.name] = failures = counts.get(tool.name, 0) + 1
        if failures > self.max_retries:
            return self._give_up(tool, tool_args, error)
        return self._create_tool_reflection_response(tool, tool_args, error, failures)

    async def _reset_failures_for_tool(self, tool_context: ToolContext, tool_name: str) -> None:
        """Forget the consecutive failures of ``tool_name`` in the call's scope (a success)."""
        with self._lock:
            self._failures.get(self._get_scope_key(tool_context), {}).pop(tool_name, None)

    def _give_up(self, tool: BaseTool, tool_args: dict[str, Any], error: Any) -> dict[str, Any]:
        if self.throw_exception_if_retry_exceeded:
            raise self._ensure_exception(error)
        return self._get_tool_retry_exceed_msg(tool, tool_args, error)

    def _ensure_exception(self, error: Any) -> Exception:
        """``error`` as an exception to raise (a reported error is wrapped in ``Exception``)."""
        return error if isinstance(error, Exception) else Exception(str(error))

    def _format_error_details(self, error: Any) -> str:
        """How an error reads in the guidance: ``Type: message`` for an exception."""
        if isinstance(error, Exception):
            return f"{type(error).__name__}: {error}"
        return str(error)

    def _create_tool_reflection_response(
        self, tool: BaseTool, tool_args: dict[str, Any], error: Any, retry_count: int
    ) -> dict[str, Any]:
        """The answer to failure ``retry_count`` (1-based) of ``tool``: guidance to retry."""
        return _response(error, retry_count, _retry_guidance(
            tool, tool_args, self._format_error_details(error), retry_count, self.max_retries))

    def _get_tool_retry_exceed_msg(
        self, tool: BaseTool, tool_args: dict[str, Any], error: Any
    ) -> dict[str, Any]:
        """The answer once ``tool`` failed past the limit: stop using it."""
        return _response(error, self.max_retries, _stop_guidance(
            tool, tool_args, self._format_error_details(error), self.max_retries))


def _response(error: Any, retry_count: int, guidance: str) -> dict[str, Any]:
    return ToolFailureResponse(
        error_type=type(error).__name__ if isinstance(error, Exception) else "ToolError",
        error_details=str(error),
        retry_count=retry_count,
        reflection_guidance=guidance,
    ).model_dump(mode="json")


def _retry_guidance(
    tool: BaseTool, tool_args: dict[str, Any], details: str, attempt: int, max_retries: int
) -> str:
    arguments = json.dumps(tool_args, indent=2, default=str)
    return (
        f"Calling the tool `{tool.name}` failed (attempt {attempt} of {max_retries}).\n\n"
        f"Error:\n```\n{details}\n```\n\n"
        f"Arguments sent:\n```json\n{arguments}\n```\n\n"
        "Before you try again, work out why it failed rather than repeating the same call:\n"
        "1. Are the arguments right: present, well formed, as the tool's schema asks?\n"
        "2. Was something this call relies on left undone or failed earlier?\n"
        "3. Would another tool, or another order of steps, reach the goal?\n"
        "4. Can the task be split into smaller steps?\n"
        "5. If the tool was not found, call only tools that are available.\n"
        "Then make a corrected or different call."
    )


def _stop_guidance(
    tool: BaseTool, tool_args: dict[str, Any], details: str, max_retries: int
) -> str:
    arguments = json.dumps(tool_args, indent=2, default=str)
    return (
        f"The tool `{tool.name}` failed {max_retries} times in a row: no more retries.\n\n"
        f"Last error:\n```\n{details}\n```\n\n"
        f"Last arguments:\n```json\n{arguments}\n```\n\n"
        f"Do not call `{tool.name}` again for this task. Take another approach with the "
        "other tools, or tell the user that the task cannot be completed."
    )
