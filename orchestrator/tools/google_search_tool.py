"""google_search: Gemini's Google Search grounding, a tool the model runs itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.tools._gemini_builtin import GeminiBuiltInTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext
    from orchestrator.models.llm_request import LlmRequest


class GoogleSearchTool(GeminiBuiltInTool):
    """Lets a Gemini model search Google and ground its answer on the results.

    Before Gemini 3, the model refuses search in a request that also declares functions:
    an agent with other tools or with transfer targets then needs
    ``bypass_multi_tools_limit=True``, which runs the search in a sub-agent called as a tool
    (``GoogleSearchAgentTool``).
    """

    def __init__(self, *, bypass_multi_tools_limit: bool = False, model: str | None = None) -> None:
        super().__init__(name="google_search", description="google_search")
        self.bypass_multi_tools_limit = bypass_multi_tools_limit
        """Wrap the search in a sub-agent when the agent has other tools."""
        self.model = model
        """A model name to send the request to instead of the agent's."""

    def _model_for(self, llm_request: LlmRequest) -> str | None:
        if self.model is not None:
            llm_request.model = self.model
        return llm_request.model

    def _builtin_tool(self, tool_context: ToolContext) -> types.Tool:
        return types.Tool(google_search=types.GoogleSearch())


google_search = GoogleSearchTool()
"""The shared instance agents list in ``tools=[...]``."""
