"""The shape every Gemini built-in tool shares: declared in the request, run by the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.models.model_names import gemini_builtin_tools_allowed
from orchestrator.tools.base_tool import BaseTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext
    from orchestrator.models.llm_request import LlmRequest


class GeminiBuiltInTool(BaseTool):
    """A tool the model runs itself: it adds a ``types.Tool`` to ``llm_request.config.tools``.

    Nothing runs in this process (the model never sends a function call for it, and it has no
    function declaration). A request for a model other than Gemini is refused with a
    ``ValueError`` naming the tool and the model, as google-adk does (unless the setting
    ``disable_gemini_model_id_check`` is on).
    """

    def _builtin_tool(self, tool_context: ToolContext) -> types.Tool:
        """The ``types.Tool`` entry sent to the model."""
        raise NotImplementedError

    def _model_for(self, llm_request: LlmRequest) -> str | None:
        return llm_request.model

    async def process_llm_request(
        self, *, tool_context: ToolContext, llm_request: LlmRequest
    ) -> None:
        """Add the built-in tool to the request's config."""
        model = self._model_for(llm_request)
        if not gemini_builtin_tools_allowed(model):
            raise ValueError(
                f"{self.name} is a Gemini built-in tool: model {model!r} does not support it."
            )
        if llm_request.config.tools is None:
            llm_request.config.tools = []
        llm_request.config.tools.append(self._builtin_tool(tool_context))
