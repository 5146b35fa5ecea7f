"""Artifact services: versioned files saved by agents and tools, per session or per user."""

from typing import TYPE_CHECKING, Any

from orchestrator.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService
from orchestrator.artifacts.in_memory_artifact_service import InMemoryArtifactService

if TYPE_CHECKING:
    from orchestrator.backends.redis.artifact_service import RedisArtifactService

__all__ = [
    "ArtifactVersion",
    "BaseArtifactService",
    "InMemoryArtifactService",
    "RedisArtifactService",
]


def __getattr__(name: str) -> Any:
    """``RedisArtifactService``, imported on first use (``import orchestrator`` skips redis-py)."""
    if name != "RedisArtifactService":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from orchestrator.backends.redis.artifact_service import RedisArtifactService

    globals()[name] = RedisArtifactService
    return RedisArtifactService
