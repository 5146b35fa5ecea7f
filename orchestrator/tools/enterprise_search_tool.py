"""enterprise_web_search: Gemini's web grounding for enterprise compliance (Vertex AI)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.tools._gemini_builtin import GeminiBuiltInTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext


class EnterpriseWebSearchTool(GeminiBuiltInTool):
    """Lets a Gemini model ground on the web through Vertex AI's enterprise web search."""

    def __init__(self) -> None:
        super().__init__(name="enterprise_web_search", description="enterprise_web_search")

    def _builtin_tool(self, tool_context: ToolContext) -> types.Tool:
        return types.Tool(enterprise_web_search=types.EnterpriseWebSearch())


enterprise_web_search_tool = EnterpriseWebSearchTool()
"""The shared instance (``orchestrator.tools.enterprise_web_search``)."""
