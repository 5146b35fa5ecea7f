"""load_memory: lets the model search the user's long-term memory."""

from __future__ import annotations

from typing import Any

from orchestrator.agents.context import ToolContext


async def load_memory(query: str, tool_context: ToolContext) -> dict[str, Any]:
    """Search the memory of past conversations for the user; returns matching snippets."""
    response = await tool_context.search_memory(query)
    memories = []
    for entry in response.memories:
        text = " ".join(p.text for p in entry.content.parts or [] if p.text)
        memories.append({"author": entry.author, "timestamp": entry.timestamp, "text": text})
    return {"memories": memories}
