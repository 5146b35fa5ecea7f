"""load_artifact_text: lets the model read a text artifact of the session."""

from __future__ import annotations

from typing import Any

from orchestrator.agents.context import ToolContext


async def load_artifact_text(filename: str, tool_context: ToolContext) -> dict[str, Any]:
    """Read the latest version of a text artifact saved in this session."""
    part = await tool_context.load_artifact(filename)
    if part is None:
        available = await tool_context.list_artifacts()
        return {"error": f"No artifact named {filename!r}. Available: {available or 'none'}."}
    if part.text is None:
        return {"error": f"Artifact {filename!r} is not text."}
    return {"filename": filename, "text": part.text}
