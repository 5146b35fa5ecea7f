"""MemoryEntry: one remembered item, as memory services store and return it."""

from __future__ import annotations

from typing import Any

from google.genai import types
from pydantic import BaseModel, Field


class MemoryEntry(BaseModel):
    """One remembered item, usually the content of a past event."""

    content: types.Content
    """What is remembered."""
    custom_metadata: dict[str, Any] = Field(default_factory=dict)
    """Caller-supplied metadata stored with the memory."""
    id: str | None = None
    """Unique id of the memory (the source event's id for ingested events)."""
    author: str | None = None
    """Who produced the content (the source event's author)."""
    timestamp: str | None = None
    """When the content was produced, as an ISO 8601 string."""
