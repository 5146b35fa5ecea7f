"""Tools that set an action of their answer, and a way to send a tool to workers."""

from __future__ import annotations

from typing import Any

from orchestrator import FunctionTool, ToolContext
from orchestrator.distributed.transport import QUEUE_METADATA_KEY


def remote(func: Any, queue: str = "adk.tools") -> FunctionTool:
    """``func`` as a plain tool whose calls run on workers (its queue metadata)."""
    tool = FunctionTool(func)
    tool.custom_metadata = {QUEUE_METADATA_KEY: queue}
    return tool


def skip_tool(tool_context: ToolContext) -> dict[str, Any]:
    """Its answer ends the agent's turn (``skip_summarization``)."""
    tool_context.actions.skip_summarization = True
    return {"raw": 1}


def to_helper(tool_context: ToolContext) -> dict[str, Any]:
    """Its answer hands the turn to the agent named ``helper``."""
    tool_context.actions.transfer_to_agent = "helper"
    return {"routed": True}


def stop_tool(tool_context: ToolContext) -> dict[str, Any]:
    """Its answer ends an enclosing LoopAgent (``escalate``)."""
    tool_context.actions.escalate = True
    return {"stopped": True}
