"""PluginManager: calls one callback on every plugin of an app, in registration order."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.plugins.base_plugin import BasePlugin

if TYPE_CHECKING:
    from google.genai import types

    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.agents.context import CallbackContext, ToolContext
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.events.event import Event
    from orchestrator.models.llm_request import LlmRequest
    from orchestrator.models.llm_response import LlmResponse
    from orchestrator.tools.base_tool import BaseTool

logger = logging.getLogger(__name__)

PluginCallbackName = Literal[
    "on_user_message_callback",
    "before_run_callback",
    "after_run_callback",
    "on_event_callback",
    "before_agent_callback",
    "after_agent_callback",
    "before_tool_callback",
    "after_tool_callback",
    "before_model_callback",
    "after_model_callback",
    "on_tool_error_callback",
    "on_model_error_callback",
    "on_agent_error_callback",
    "on_run_error_callback",
]
"""The callbacks a plugin can implement."""


class PluginManager:
    """The plugins of one app and the rules for calling them.

    ``run_*`` methods call a callback on each plugin in turn and stop at the first plugin
    that returns something other than None; that value is returned (None if every plugin
    returned None). A plugin that raises stops the chain with a ``RuntimeError`` naming the
    plugin and the callback, the plugin's exception chained to it. The ``*_error``
    notifications of agents and runs are different: every plugin is told, and a plugin that
    raises there is logged and skipped.
    """

    def __init__(
        self, plugins: Iterable[BasePlugin] | None = None, close_timeout: float = 5.0
    ) -> None:
        self.plugins: list[BasePlugin] = []
        """Registered plugins, in calling order."""
        self._close_timeout = close_timeout
        self._skip_closing = False
        for plugin in plugins or ():
            self.register_plugin(plugin)

    def register_plugin(self, plugin: BasePlugin) -> None:
        """Add a plugin at the end; a second plugin of the same name is a ValueError."""
        if not isinstance(plugin, BasePlugin):
            raise TypeError(
                f"plugins: {plugin!r} is a {type(plugin).__name__}, not a BasePlugin."
            )
        if any(p.name == plugin.name for p in self.plugins):
            raise ValueError(f"Plugin with name '{plugin.name}' already registered.")
        self.plugins.append(plugin)

    def gets_model_requests(self) -> bool:
        """True if a plugin has a callback that is handed the model request."""
        return any(
            type(plugin).before_model_callback is not BasePlugin.before_model_callback
            or type(plugin).on_model_error_callback is not BasePlugin.on_model_error_callback
            for plugin in self.plugins
        )

    def get_plugin(self, plugin_name: str) -> BasePlugin | None:
        """The registered plugin called ``plugin_name``, or None."""
        return next((p for p in self.plugins if p.name == plugin_name), None)

    def set_skip_closing_plugins(self, value: bool) -> None:
        """With True, ``close()`` leaves the plugins open (another component owns them)."""
        self._skip_closing = value

    # -- run callbacks ------------------------------------------------------------------------

    async def run_on_user_message_callback(
        self, *, user_message: types.Content, invocation_context: InvocationContext
    ) -> types.Content | None:
        """The first replacement of the user's message, if a plugin gives one."""
        return await self._run_callbacks(
            "on_user_message_callback",
            user_message=user_message, invocation_context=invocation_context,
        )

    async def run_before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> types.Content | None:
        """The content that ends the run before the agent starts, if a plugin gives one."""
        return await self._run_callbacks(
            "before_run_callback", invocation_context=invocation_context
        )

    async def run_after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """Tell the plugins the run ended."""
        await self._run_callbacks("after_run_callback", invocation_context=invocation_context)

    async def run_on_event_callback(
        self, *, invocation_context: InvocationContext, event: Event
    ) -> Event | None:
        """The first replacement of ``event``, if a plugin gives one."""
        return await self._run_callbacks(
            "on_event_callback", invocation_context=invocation_context, event=event
        )

    async def run_on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        """Tell every plugin that the run raised ``error``."""
        await self._notify(
            "on_run_error_callback", invocation_context=invocation_context, error=error
        )

    # -- agent callbacks ----------------------------------------------------------------------

    async def run_before_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> types.Content | None:
        """Content that answers for ``agent`` (which is then skipped), if a plugin gives it."""
        return await self._run_callbacks(
            "before_agent_callback", agent=agent, callback_context=callback_context
        )

    async def run_after_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> types.Content | None:
        """Content added after ``agent`` ran, if a plugin gives it."""
        return await self._run_callbacks(
            "after_agent_callback", agent=agent, callback_context=callback_context
        )

    async def run_on_agent_error_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext, error: Exception
    ) -> None:
        """Tell every plugin that ``agent`` raised ``error``."""
        await self._notify(
            "on_agent_error_callback",
            agent=agent, callback_context=callback_context, error=error,
        )

    # -- model callbacks ----------------------------------------------------------------------

    async def run_before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """A response that replaces the model call, if a plugin gives one."""
        return await self._run_callbacks(
            "before_model_callback", callback_context=callback_context, llm_request=llm_request
        )

    async def run_after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """A replacement of ``llm_response``, if a plugin gives one."""
        return await self._run_callbacks(
            "after_model_callback", callback_context=callback_context, llm_response=llm_response
        )

    async def run_on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        """A response that stands for the failed model call, if a plugin gives one."""
        return await self._run_callbacks(
            "on_model_error_callback",
            callback_context=callback_context, llm_request=llm_request, error=error,
        )

    # -- tool callbacks -----------------------------------------------------------------------

    async def run_before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """A result that replaces running the tool, if a plugin gives one."""
        return await self._run_callbacks(
            "before_tool_callback", tool=tool, tool_args=tool_args, tool_context=tool_context
        )

    async def run_after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        """A replacement of the tool's ``result``, if a plugin gives one."""
        return await self._run_callbacks(
            "after_tool_callback",
            tool=tool, tool_args=tool_args, tool_context=tool_context, result=result,
        )

    async def run_on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        """A result that stands for the failed tool call, if a plugin gives one."""
        return await self._run_callbacks(
            "on_tool_error_callback",
            tool=tool, tool_args=tool_args, tool_context=tool_context, error=error,
        )

    # -- mechanics ----------------------------------------------------------------------------

    async def _run_callbacks(self, callback_name: PluginCallbackName, **kwargs: Any) -> Any:
        for plugin in self.plugins:
            try:
                result = await getattr(plugin, callback_name)(**kwargs)
            except Exception as error:
                message = (
                    f"Error in plugin '{plugin.name}' during '{callback_name}' callback: {error}"
                )
                logger.error(message, exc_info=True)
                raise RuntimeError(message) from error
            if result is not None:
                # The first answer wins: later plugins (and the agent's callbacks) are skipped.
                return result
        return None

    async def _notify(self, callback_name: PluginCallbackName, **kwargs: Any) -> None:
        for plugin in self.plugins:
            try:
                await getattr(plugin, callback_name)(**kwargs)
            except Exception:  # a notification must not hide the error it reports
                logger.exception(
                    "Error in plugin '%s' during '%s' callback", plugin.name, callback_name
                )

    async def close(self) -> None:
        """Close every plugin, one after the other, each within the close timeout.

        Failures do not stop the others; they are raised together afterwards as one
        RuntimeError naming the plugins.
        """
        if self._skip_closing:
            return
        failures: dict[str, BaseException] = {}
        cancelled: asyncio.CancelledError | None = None
        for plugin in self.plugins:
            try:
                async with asyncio.timeout(self._close_timeout):
                    await plugin.close()
            except asyncio.CancelledError as error:
                cancelled = error
            except Exception as error:
                failures[plugin.name] = error
                logger.warning("Closing plugin %r failed: %r", plugin.name, error)
        if cancelled is not None:
            raise cancelled
        if failures:
            summary = ", ".join(f"'{n}': {type(e).__name__}" for n, e in failures.items())
            raise RuntimeError(f"Failed to close plugins: {summary}")
