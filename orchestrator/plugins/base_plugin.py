"""BasePlugin: app-wide callbacks around runs, agents, model calls and tool calls.

A plugin is registered once, on the ``App`` (or ``Runner(plugins=...)``), and applies to
every agent of the app. Each callback is an async method taking keyword arguments; the
default implementation does nothing and returns None.

Order and short-circuit (see ``PluginManager``): plugins run in registration order and
before the agent's own callbacks of the same kind. The first plugin that returns something
other than None ends the chain: later plugins and the agent's callbacks are skipped and
that value is used. Arguments are shared objects: a plugin that changes the request, the
tool arguments or the response changes them for everything that runs after it.

Where they run in adk-celery: run callbacks (``on_user_message``, ``before_run``,
``on_event``, ``after_run``, ``on_run_error``) run in the process that runs the Runner (an
orchestrator); agent and model callbacks run where the agent runs; tool callbacks run where
the tool runs (the worker, for a tool routed to workers).
"""

from __future__ import annotations

from abc import ABC
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.genai import types

    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.agents.context import CallbackContext, ToolContext
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.events.event import Event
    from orchestrator.models.llm_request import LlmRequest
    from orchestrator.models.llm_response import LlmResponse
    from orchestrator.tools.base_tool import BaseTool


class BasePlugin(ABC):  # noqa: B024  (every callback is optional: none is abstract)
    """Base class of plugins: override the callbacks you need.

    ``name`` identifies the plugin; two plugins of one app must have different names.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        """Unique among the plugins of an app."""

    # -- run callbacks (the Runner's process) -------------------------------------------------

    async def on_user_message_callback(
        self, *, invocation_context: InvocationContext, user_message: types.Content
    ) -> types.Content | None:
        """Called with the user's message before it is committed; return Content to replace it."""
        return None

    async def before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> types.Content | None:
        """Called before the agent runs; returned Content ends the run with one event by ``model``."""
        return None

    async def on_event_callback(
        self, *, invocation_context: InvocationContext, event: Event
    ) -> Event | None:
        """Called for every event the run yields (partial ones too), before it is committed.

        A returned event's explicitly set fields replace the original's, except ``id``,
        ``invocation_id`` and ``timestamp``; the result is committed and yielded.
        """
        return None

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """Called when a run ends without an error (also when the caller stops reading early)."""
        return None

    async def on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        """Told about an exception leaving the run; the exception is raised afterwards anyway."""
        return None

    async def close(self) -> None:
        """Release resources; called by ``Runner.close()``."""
        return None

    # -- agent callbacks (where the agent runs) -----------------------------------------------

    async def before_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> types.Content | None:
        """Called before an agent runs; returned Content is its answer and the agent is skipped."""
        return None

    async def after_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> types.Content | None:
        """Called after an agent ran; returned Content is committed as one more agent event."""
        return None

    async def on_agent_error_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext, error: Exception
    ) -> None:
        """Told about an exception leaving an agent; the exception is raised afterwards anyway."""
        return None

    # -- model callbacks (where the agent runs) -----------------------------------------------

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Called before a model call; a returned response is used and the model is not called."""
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """Called with each model response (streamed chunks too); a returned one replaces it."""
        return None

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        """Called when the model call raises; a returned response is used instead of the error."""
        return None

    # -- tool callbacks (where the tool runs) -------------------------------------------------

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Called before a tool runs; a returned dict is the result and the tool is not run."""
        return None

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        """Called with a tool's result; a returned dict replaces it."""
        return None

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        """Called when a tool raises (or its name is unknown); a returned dict is the result."""
        return None
