"""The memory service contract: long-term, searchable recollection of past sessions."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from orchestrator.memory.memory_entry import MemoryEntry

if TYPE_CHECKING:
    from orchestrator.events.event import Event
    from orchestrator.sessions.session import Session


class SearchMemoryResponse(BaseModel):
    """The result of a memory search."""

    memories: list[MemoryEntry] = Field(default_factory=list)
    """Matching memories, best first."""


class BaseMemoryService(ABC):
    """Ingests sessions (or single events) and answers keyword/semantic searches per user."""

    @abstractmethod
    async def add_session_to_memory(self, session: Session) -> None:
        """Ingest a session's events; calling it again for the same session is safe."""

    @abstractmethod
    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        """Return the user's memories relevant to ``query``."""

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Ingest a delta of events (optional; not supported by default)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not support add_events_to_memory."
        )

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Store explicit memory entries (optional; not supported by default)."""
        raise NotImplementedError(f"{type(self).__name__} does not support add_memory.")

    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None
    ) -> None:
        """Delete one memory by id (optional; not supported by default)."""
        raise NotImplementedError(f"{type(self).__name__} does not support delete_memory.")
