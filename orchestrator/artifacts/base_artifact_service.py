"""The artifact service contract: versioned, named binary/text blobs per session or per user."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from google.genai import types
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from orchestrator import platform


class ArtifactVersion(BaseModel):
    """Metadata of one stored version of an artifact (serialised in camelCase)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    version: int
    """The version number; the first save of a file is version 0."""
    canonical_uri: str
    """Where this version is stored, e.g. ``memory://apps/a/users/u/.../versions/0``."""
    custom_metadata: dict[str, Any] = Field(default_factory=dict)
    """Caller-supplied metadata saved with this version."""
    create_time: float = Field(default_factory=platform.get_time)
    """When this version was saved, in float seconds."""
    mime_type: str | None = None
    """Mime type of the payload (``text/plain`` for text parts), when known."""


class BaseArtifactService(ABC):
    """Stores artifacts: every save of a filename creates a new version, starting at 0.

    Filenames starting with ``user:`` are shared by all sessions of the user; any other
    filename belongs to one session and needs a ``session_id``. All methods are keyword-only.
    """

    @abstractmethod
    async def save_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        artifact: types.Part | Mapping[str, Any],
        session_id: str | None = None,
        custom_metadata: dict[str, Any] | None = None,
    ) -> int:
        """Save a new version of ``filename`` and return its version number (first is 0)."""

    @abstractmethod
    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> types.Part | None:
        """Return a version of the artifact (latest when ``version`` is None), or None."""

    @abstractmethod
    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str | None = None
    ) -> list[str]:
        """Return the sorted filenames of the session's and the user's artifacts."""

    @abstractmethod
    async def delete_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> None:
        """Delete every version of the artifact (a missing artifact is not an error)."""

    @abstractmethod
    async def list_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[int]:
        """Return the artifact's version numbers in ascending order ([] when missing)."""

    @abstractmethod
    async def list_artifact_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[ArtifactVersion]:
        """Return the metadata of every version of the artifact, oldest first."""

    @abstractmethod
    async def get_artifact_version(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> ArtifactVersion | None:
        """Return one version's metadata (latest when ``version`` is None), or None."""
