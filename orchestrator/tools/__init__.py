"""Tools, importable as from google-adk's ``google.adk.tools``.

Names load on first use (as google-adk's do): this package is imported by the contexts
module, which the tool modules themselves import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext
    from orchestrator.tools.agent_tool import AgentTool
    from orchestrator.tools.base_tool import BaseTool
    from orchestrator.tools.base_toolset import BaseToolset
    from orchestrator.tools.enterprise_search_tool import (
        enterprise_web_search_tool as enterprise_web_search,
    )
    from orchestrator.tools.exit_loop_tool import exit_loop
    from orchestrator.tools.function_tool import FunctionTool
    from orchestrator.tools.get_user_choice_tool import get_user_choice_tool as get_user_choice
    from orchestrator.tools.google_maps_grounding_tool import google_maps_grounding
    from orchestrator.tools.google_search_tool import google_search
    from orchestrator.tools.load_artifacts_tool import load_artifacts_tool as load_artifacts
    from orchestrator.tools.load_memory_tool import load_memory_tool as load_memory
    from orchestrator.tools.long_running_tool import LongRunningFunctionTool
    from orchestrator.tools.preload_memory_tool import preload_memory_tool as preload_memory
    from orchestrator.tools.transfer_to_agent_tool import TransferToAgentTool, transfer_to_agent
    from orchestrator.tools.url_context_tool import url_context
    from orchestrator.tools.vertex_ai_search_tool import VertexAiSearchTool

_LAZY: dict[str, tuple[str, str]] = {
    "AgentTool": ("orchestrator.tools.agent_tool", "AgentTool"),
    "BaseTool": ("orchestrator.tools.base_tool", "BaseTool"),
    "BaseToolset": ("orchestrator.tools.base_toolset", "BaseToolset"),
    "FunctionTool": ("orchestrator.tools.function_tool", "FunctionTool"),
    "LongRunningFunctionTool": ("orchestrator.tools.long_running_tool", "LongRunningFunctionTool"),
    "ToolContext": ("orchestrator.agents.context", "ToolContext"),
    "TransferToAgentTool": ("orchestrator.tools.transfer_to_agent_tool", "TransferToAgentTool"),
    "VertexAiSearchTool": ("orchestrator.tools.vertex_ai_search_tool", "VertexAiSearchTool"),
    "enterprise_web_search": (
        "orchestrator.tools.enterprise_search_tool", "enterprise_web_search_tool"
    ),
    "exit_loop": ("orchestrator.tools.exit_loop_tool", "exit_loop"),
    "get_user_choice": ("orchestrator.tools.get_user_choice_tool", "get_user_choice_tool"),
    "google_maps_grounding": (
        "orchestrator.tools.google_maps_grounding_tool", "google_maps_grounding"
    ),
    "google_search": ("orchestrator.tools.google_search_tool", "google_search"),
    "load_artifacts": ("orchestrator.tools.load_artifacts_tool", "load_artifacts_tool"),
    "load_memory": ("orchestrator.tools.load_memory_tool", "load_memory_tool"),
    "preload_memory": ("orchestrator.tools.preload_memory_tool", "preload_memory_tool"),
    "transfer_to_agent": ("orchestrator.tools.transfer_to_agent_tool", "transfer_to_agent"),
    "url_context": ("orchestrator.tools.url_context_tool", "url_context"),
}

__all__ = [
    "AgentTool",
    "BaseTool",
    "BaseToolset",
    "FunctionTool",
    "LongRunningFunctionTool",
    "ToolContext",
    "TransferToAgentTool",
    "VertexAiSearchTool",
    "enterprise_web_search",
    "exit_loop",
    "get_user_choice",
    "google_maps_grounding",
    "google_search",
    "load_artifacts",
    "load_memory",
    "preload_memory",
    "transfer_to_agent",
    "url_context",
]


def __getattr__(name: str) -> Any:
    """Import ``name`` from its module on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
