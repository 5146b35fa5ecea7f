"""BaseToolset: a group of tools an agent resolves when it builds a model request."""

from __future__ import annotations

import abc
import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, Union, final, runtime_checkable

from google.genai import types

from orchestrator.tools.base_tool import BaseTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ReadonlyContext, ToolContext
    from orchestrator.models.llm_request import LlmRequest


@runtime_checkable
class ToolPredicate(Protocol):
    """Decides whether a toolset offers one of its tools to the model in this context."""

    def __call__(self, tool: BaseTool, readonly_context: ReadonlyContext | None = None) -> bool:
        """True if ``tool`` may be offered."""
        ...


class BaseToolset(abc.ABC):
    """Provides tools dynamically: ``get_tools`` lists them for the running invocation.

    As in google-adk 2.13, an agent asks a toolset once per invocation
    (``get_tools_with_prefix`` keeps the answer for the invocation id it was given); a
    toolset whose tools change within an invocation sets ``_use_invocation_cache = False``.
    ``tool_filter`` is for ``get_tools`` implementations to apply (``_is_tool_selected``).
    """

    def __init__(
        self,
        *,
        tool_filter: Union[ToolPredicate, list[str], None] = None,
        tool_name_prefix: str | None = None,
    ) -> None:
        self.tool_filter = tool_filter
        """A predicate or a list of tool names selecting which tools are offered."""
        self.tool_name_prefix = tool_name_prefix
        """When set, the agent sees each tool as ``<prefix>_<name>``."""
        self._cached_invocation_id: str | None = None
        self._cached_prefixed_tools: list[BaseTool] | None = None
        self._use_invocation_cache = True

    @abc.abstractmethod
    async def get_tools(self, readonly_context: ReadonlyContext | None = None) -> list[BaseTool]:
        """Return the tools available in this context."""

    @final
    async def get_tools_with_prefix(
        self, readonly_context: ReadonlyContext | None = None
    ) -> list[BaseTool]:
        """``get_tools``, each tool renamed ``<tool_name_prefix>_<name>`` when a prefix is set.

        Renamed tools are copies (the toolset's own objects keep their names), and their
        declarations carry the new name. The result is kept for the invocation it was
        asked for.
        """
        invocation_id = readonly_context.invocation_id if readonly_context else None
        if (
            self._use_invocation_cache
            and self._cached_prefixed_tools is not None
            and self._cached_invocation_id == invocation_id
        ):
            return self._cached_prefixed_tools
        tools = await self.get_tools(readonly_context)
        if self.tool_name_prefix:
            tools = [_renamed(tool, f"{self.tool_name_prefix}_{tool.name}") for tool in tools]
        self._cached_invocation_id = invocation_id
        self._cached_prefixed_tools = tools
        return tools

    async def process_llm_request(
        self, *, tool_context: ToolContext, llm_request: LlmRequest
    ) -> None:
        """Change the model request for the whole toolset; runs before its tools' own.

        Does nothing by default; a toolset that adds one built-in tool for all of its
        tools, say, does it here.
        """

    async def close(self) -> None:
        """Release resources held by the toolset."""

    def _is_tool_selected(self, tool: BaseTool, readonly_context: ReadonlyContext | None) -> bool:
        """Apply ``tool_filter`` to one tool (no filter, or an empty one, selects all)."""
        if not self.tool_filter:
            return True
        if isinstance(self.tool_filter, list):
            return tool.name in self.tool_filter
        if isinstance(self.tool_filter, ToolPredicate):
            return self.tool_filter(tool, readonly_context)
        return False


def _renamed(tool: BaseTool, name: str) -> BaseTool:
    """A shallow copy of ``tool`` called ``name``, declared under that name too."""
    renamed = copy.copy(tool)
    renamed.name = name
    declare: Callable[[], types.FunctionDeclaration | None] = tool._get_declaration

    def _get_declaration() -> types.FunctionDeclaration | None:
        declaration = declare()
        if declaration is None:
            return None
        # A copy: the original tool may cache its declaration object.
        return declaration.model_copy(update={"name": name})

    renamed._get_declaration = _get_declaration  # type: ignore[method-assign]
    return renamed
