"""``ReadonlyContext`` at google-adk's module path."""

from orchestrator.agents.context import ReadonlyContext

__all__ = ["ReadonlyContext"]
