"""``ToolContext`` at google-adk's module path (one class with CallbackContext, as in ADK 2.x)."""

from orchestrator.agents.context import CallbackContext, Context, ToolContext

__all__ = ["CallbackContext", "Context", "ToolContext"]
