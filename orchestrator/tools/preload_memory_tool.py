"""preload_memory: memories matching the user's message go into every model request."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.tools.base_tool import BaseTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext
    from orchestrator.models.llm_request import LlmRequest

logger = logging.getLogger(__name__)

_PREAMBLE = (
    "Excerpts of earlier conversations with this user, found by searching memory for the "
    "current message; use them if they help."
)


class PreloadMemoryTool(BaseTool):
    """Searches memory with the user's message before each model call (the model never calls it).

    The matches are added to that request only, just before the user's latest message, as
    ``Time: ...`` and ``author: text`` lines; nothing is stored in the session. A failing
    memory search is logged and the request goes out without them.
    """

    def __init__(self) -> None:
        super().__init__(name="preload_memory", description="preload_memory")

    async def process_llm_request(
        self, *, tool_context: ToolContext, llm_request: LlmRequest
    ) -> None:
        """Add the memories matching the user's message to this request."""
        content = tool_context.user_content
        query = " ".join(
            p.text for p in (content.parts or [] if content else []) if p.text and not p.thought
        )
        if not query:
            return
        try:
            response = await tool_context.search_memory(query)
        except Exception:  # memory is a help, never a reason to fail the turn
            logger.warning("preload_memory: the memory search failed (query of %d characters)",
                           len(query), exc_info=True)
            return
        lines: list[str] = []
        for memory in response.memories:
            if memory.timestamp:
                lines.append(f"Time: {memory.timestamp}")
            text = " ".join(p.text for p in memory.content.parts or [] if p.text)
            if text:
                lines.append(f"{memory.author}: {text}" if memory.author else text)
        if not lines:
            return
        block = "\n".join(lines)
        # The tag as google-adk writes it: an agent's instruction may name it.
        text = f"{_PREAMBLE}\n<PAST_CONVERSATIONS>\n{block}\n</PAST_CONVERSATIONS>\n"
        llm_request._insert_transient_user_content(
            [types.Content(role="user", parts=[types.Part(text=text)])]
        )


preload_memory_tool = PreloadMemoryTool()
"""The shared instance (``orchestrator.tools.preload_memory``)."""
