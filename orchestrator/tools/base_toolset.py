"""BaseToolset: a group of tools resolved on every model step."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, Union

from orchestrator.tools.base_tool import BaseTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ReadonlyContext

ToolPredicate = Callable[[BaseTool, "ReadonlyContext | None"], bool]


class BaseToolset(abc.ABC):
    """Provides tools dynamically; ``get_tools`` is called for each model request."""

    def __init__(
        self, *, tool_filter: Union[ToolPredicate, list[str], None] = None
    ) -> None:
        self.tool_filter = tool_filter
        """A predicate or a list of tool names selecting which tools are offered."""

    @abc.abstractmethod
    async def get_tools(self, readonly_context: ReadonlyContext | None = None) -> list[BaseTool]:
        """Return the tools available in this context."""

    async def close(self) -> None:
        """Release resources held by the toolset."""

    def _is_tool_selected(self, tool: BaseTool, readonly_context: ReadonlyContext | None) -> bool:
        """Apply ``tool_filter`` to one tool."""
        if self.tool_filter is None:
            return True
        if isinstance(self.tool_filter, list):
            return tool.name in self.tool_filter
        return self.tool_filter(tool, readonly_context)
