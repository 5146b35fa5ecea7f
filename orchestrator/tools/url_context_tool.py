"""url_context: Gemini reads the pages of URLs in the conversation, on the model's side."""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.tools._gemini_builtin import GeminiBuiltInTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext


class UrlContextTool(GeminiBuiltInTool):
    """Lets a Gemini model fetch the URLs it is given and use their content in its answer."""

    def __init__(self) -> None:
        super().__init__(name="url_context", description="url_context")

    def _builtin_tool(self, tool_context: ToolContext) -> types.Tool:
        return types.Tool(url_context=types.UrlContext())


url_context = UrlContextTool()
"""The shared instance agents list in ``tools=[...]``."""
