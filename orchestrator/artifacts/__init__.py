"""Artifact services: versioned files saved by agents and tools, per session or per user."""

from orchestrator.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService
from orchestrator.artifacts.in_memory_artifact_service import InMemoryArtifactService
from orchestrator.backends.redis.artifact_service import RedisArtifactService

__all__ = [
    "ArtifactVersion",
    "BaseArtifactService",
    "InMemoryArtifactService",
    "RedisArtifactService",
]
