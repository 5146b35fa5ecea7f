"""exit_loop: the tool a sub-agent of a LoopAgent calls to end the loop."""

from __future__ import annotations

from orchestrator.agents.context import ToolContext


def exit_loop(tool_context: ToolContext) -> None:
    """Exits the loop.

    Call this function only when you are instructed to do so.
    """
    tool_context.actions.escalate = True
    tool_context.actions.skip_summarization = True
