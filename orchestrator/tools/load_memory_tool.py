"""load_memory: the model searches the user's memory of past conversations when it wants."""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.genai import types
from pydantic import BaseModel, Field

from orchestrator.agents.context import ToolContext
from orchestrator.memory.memory_entry import MemoryEntry
from orchestrator.tools.function_tool import FunctionTool

if TYPE_CHECKING:
    from orchestrator.models.llm_request import LlmRequest

_INSTRUCTION = (
    "You can remember earlier conversations with this user: when a question needs them, "
    "call load_memory with a search query."
)


class LoadMemoryResponse(BaseModel):
    """What ``load_memory`` answers: the memories matching the query."""

    memories: list[MemoryEntry] = Field(default_factory=list)
    """Best matches first, as the memory service ranks them."""


async def load_memory(query: str, tool_context: ToolContext) -> LoadMemoryResponse:
    """Search the memory of earlier conversations with this user; returns what matches."""
    response = await tool_context.search_memory(query)
    return LoadMemoryResponse(memories=response.memories)


class LoadMemoryTool(FunctionTool):
    """``load_memory`` as a tool; it also tells the model (system instruction) it has memory."""

    def __init__(self) -> None:
        super().__init__(load_memory)

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        """One required string parameter, ``query``."""
        return types.FunctionDeclaration(
            name=self.name,
            description=self.description,
            parameters_json_schema={
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        )

    async def process_llm_request(
        self, *, tool_context: ToolContext, llm_request: LlmRequest
    ) -> None:
        """Declare the tool and say in the system instruction when to use it."""
        await super().process_llm_request(tool_context=tool_context, llm_request=llm_request)
        llm_request.append_instructions([_INSTRUCTION])


load_memory_tool = LoadMemoryTool()
"""The shared instance (``orchestrator.tools.load_memory``)."""
