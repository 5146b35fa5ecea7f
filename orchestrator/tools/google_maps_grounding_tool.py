"""google_maps_grounding: Gemini grounds its answer on Google Maps (Vertex AI only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.tools._gemini_builtin import GeminiBuiltInTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext


class GoogleMapsGroundingTool(GeminiBuiltInTool):
    """Lets a Gemini model look places up on Google Maps (the Vertex AI Gemini API has it)."""

    def __init__(self) -> None:
        super().__init__(name="google_maps", description="google_maps")

    def _builtin_tool(self, tool_context: ToolContext) -> types.Tool:
        return types.Tool(google_maps=types.GoogleMaps())


google_maps_grounding = GoogleMapsGroundingTool()
"""The shared instance agents list in ``tools=[...]``."""
