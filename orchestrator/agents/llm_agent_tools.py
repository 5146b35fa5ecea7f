"""An LlmAgent's ``tools`` resolved into the BaseTools a model request declares.

Functions become FunctionTools (built once per function), toolsets are asked for their
current tools (concurrently; one that fails is left out with an error log, as in
google-adk), and a built-in search asking to bypass the one-tool limit beside other tools
becomes a search agent called as a tool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orchestrator.agents.context import ReadonlyContext
from orchestrator.tools.base_tool import BaseTool
from orchestrator.tools.base_toolset import BaseToolset
from orchestrator.tools.function_tool import FunctionTool
from orchestrator.tools.google_search_tool import GoogleSearchTool
from orchestrator.tools.vertex_ai_search_tool import VertexAiSearchTool

if TYPE_CHECKING:
    from orchestrator.agents.llm_agent import LlmAgent

logger = logging.getLogger(__name__)

_tool_cache: dict[int, tuple[Callable[..., Any], FunctionTool]] = {}


async def resolve_tool_unions(
    agent: LlmAgent, ctx: ReadonlyContext | None = None
) -> list[tuple[Any, list[BaseTool]]]:
    """Each entry of ``agent.tools`` with the BaseTools it stands for now, in order."""
    # Only a built-in search asking to bypass the one-tool limit cares whether there are
    # other tools (or transfer targets); most agents skip the question.
    multiple = any(
        isinstance(t, GoogleSearchTool | VertexAiSearchTool) and t.bypass_multi_tools_limit
        for t in agent.tools
    ) and (len(agent.tools) > 1 or _has_transfer_targets(agent))
    listings = [_list_toolset(agent, t, ctx) for t in agent.tools if isinstance(t, BaseToolset)]
    if not listings:
        return [(t, _resolve_tool(agent, t, multiple)) for t in agent.tools]
    # Toolsets are asked concurrently (a listing may be a network round trip).
    listed = iter(await asyncio.gather(*listings))
    return [
        (t, next(listed) if isinstance(t, BaseToolset) else _resolve_tool(agent, t, multiple))
        for t in agent.tools
    ]


def _has_transfer_targets(agent: LlmAgent) -> bool:
    from orchestrator.flows.transfer import transfer_targets

    return bool(transfer_targets(agent))


def _resolve_tool(agent: LlmAgent, tool: Any, multiple: bool) -> list[BaseTool]:
    if multiple and isinstance(tool, GoogleSearchTool) and tool.bypass_multi_tools_limit:
        from orchestrator.tools.google_search_agent_tool import (
            GoogleSearchAgentTool,
            create_google_search_agent,
        )

        return [GoogleSearchAgentTool(create_google_search_agent(agent.canonical_model))]
    if multiple and isinstance(tool, VertexAiSearchTool) and tool.bypass_multi_tools_limit:
        raise ValueError(
            f"Agent {agent.name!r}: VertexAiSearchTool(bypass_multi_tools_limit=True) beside "
            "other tools needs google-adk's DiscoveryEngineSearchTool, which adk-celery does "
            "not ship; give the search an agent of its own and call it with AgentTool."
        )
    if isinstance(tool, BaseTool):
        return [tool]
    if callable(tool):
        return [_function_tool(tool)]
    raise TypeError(f"Agent {agent.name!r}: unsupported tool {tool!r}.")


async def _list_toolset(
    agent: LlmAgent, toolset: BaseToolset, ctx: ReadonlyContext | None
) -> list[BaseTool]:
    try:
        return await toolset.get_tools_with_prefix(ctx)
    except Exception as error:
        prefix = f" (prefix {toolset.tool_name_prefix!r})" if toolset.tool_name_prefix else ""
        logger.error(
            "Agent %s runs without the tools of toolset %s%s: listing them failed: %s",
            agent.name, type(toolset).__name__, prefix, error, exc_info=True,
        )
        return []


def _function_tool(fn: Callable[..., Any]) -> FunctionTool:
    # Building a FunctionTool inspects the signature; do it once per function.
    cached = _tool_cache.get(id(fn))
    if cached is not None and cached[0] is fn:
        return cached[1]
    tool = FunctionTool(fn)
    _tool_cache[id(fn)] = (fn, tool)
    return tool
