"""``Gemini`` at google-adk's module path (``google.adk.models.google_llm``)."""

from orchestrator.models.gemini import Gemini

__all__ = ["Gemini"]
