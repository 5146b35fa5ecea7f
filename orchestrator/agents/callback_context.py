"""``CallbackContext`` at google-adk's module path (an alias of ``Context`` in ADK 2.x)."""

from orchestrator.agents.context import CallbackContext, Context

__all__ = ["CallbackContext", "Context"]
