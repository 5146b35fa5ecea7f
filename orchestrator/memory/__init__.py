"""Memory services: long-term recollection of past sessions, searchable per user."""

from orchestrator.memory.base_memory_service import (
    BaseMemoryService,
    MemoryEntry,
    SearchMemoryResponse,
)
from orchestrator.memory.in_memory_memory_service import InMemoryMemoryService

__all__ = ["BaseMemoryService", "InMemoryMemoryService", "MemoryEntry", "SearchMemoryResponse"]
