"""An artifact service keeping every version in process memory (tests, single process)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.genai import types

from orchestrator import platform
from orchestrator.artifacts import _scoping
from orchestrator.artifacts._scoping import ArtifactLocation
from orchestrator.artifacts.artifact_util import is_rewind_tombstone
from orchestrator.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService
from orchestrator.errors import InputValidationError

_URI_SCHEME = "memory"


@dataclass(frozen=True, slots=True)
class _StoredVersion:
    """One saved version: the payload and its metadata (both private copies)."""

    part: types.Part
    info: ArtifactVersion


class _VersionStore:
    """How versions are kept: an append-only list per artifact location.

    This is the only storage-specific piece of the service; scoping, validation and URI
    rules live in ``_scoping``.
    """

    def __init__(self) -> None:
        self._versions: dict[ArtifactLocation, list[_StoredVersion]] = {}

    def next_version(self, location: ArtifactLocation) -> int:
        """Return the version number the next save of ``location`` will get."""
        return len(self._versions.get(location, ()))

    def append(self, location: ArtifactLocation, stored: _StoredVersion) -> None:
        """Append a version (its ``info.version`` must equal ``next_version``)."""
        self._versions.setdefault(location, []).append(stored)

    def versions(self, location: ArtifactLocation) -> list[_StoredVersion]:
        """Return the stored versions of ``location``, oldest first."""
        return list(self._versions.get(location, ()))

    def delete(self, location: ArtifactLocation) -> None:
        """Forget every version of ``location``."""
        self._versions.pop(location, None)

    def filenames(self, app_name: str, user_id: str, session_id: str | None) -> set[str]:
        """Return filenames stored in that exact scope (``session_id`` None = user scope)."""
        return {
            loc.filename
            for loc, stored in self._versions.items()
            if stored
            and loc.app_name == app_name
            and loc.user_id == user_id
            and loc.session_id == session_id
        }


class InMemoryArtifactService(BaseArtifactService):
    """Artifacts held in a dict; canonical URIs use the ``memory://`` scheme.

    Saved payloads and metadata are copied on the way in and on the way out, so callers
    never share objects with the store. ``file_data`` parts whose URI is an ``artifact://``
    reference are resolved to the referenced artifact's payload on load.
    """

    def __init__(self) -> None:
        self._store = _VersionStore()

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
        location = _scoping.locate(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        part = _scoping.coerce_part(artifact, location, session_id)
        version = self._store.next_version(location)
        info = ArtifactVersion(
            version=version,
            canonical_uri=location.uri(_URI_SCHEME, version),
            custom_metadata=copy.deepcopy(custom_metadata) if custom_metadata else {},
            create_time=platform.get_time(),
            mime_type=_scoping.detect_mime_type(part),
        )
        self._store.append(location, _StoredVersion(part=part, info=info))
        return version

    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> types.Part | None:
        """Return a copy of a version (latest when ``version`` is None), or None if missing."""
        location = _scoping.locate(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        return self._load(location, version, session_id, seen=set())

    def _load(
        self,
        location: ArtifactLocation,
        version: int | None,
        session_id: str | None,
        seen: set[tuple[ArtifactLocation, int]],
    ) -> types.Part | None:
        stored = self._select(location, version)
        if stored is None:
            return None
        key = (location, stored.info.version)
        if key in seen:
            raise InputValidationError(
                f"Circular artifact reference through {location.artifact_ref_uri(key[1])!r}."
            )
        seen.add(key)
        target = _scoping.follow_reference(stored.part, location, session_id, len(seen) - 1)
        if target is None:
            return None if is_rewind_tombstone(stored.part) else stored.part.model_copy(deep=True)
        # Past a reference, the session is the one of the artifact it names.
        return self._load(*target, target[0].session_id, seen)

    def _select(self, location: ArtifactLocation, version: int | None) -> _StoredVersion | None:
        versions = self._store.versions(location)
        index = _scoping.select_version(len(versions), version)
        return versions[index] if index is not None else None

    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str | None = None
    ) -> list[str]:
        """Return the sorted filenames of the session's (when given) and the user's artifacts."""
        names = self._store.filenames(app_name, user_id, None)
        if session_id:
            names |= self._store.filenames(app_name, user_id, session_id)
        return sorted(names)

    async def delete_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> None:
        """Delete every version of the artifact; the next save starts again at version 0."""
        location = _scoping.locate(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        self._store.delete(location)

    async def list_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[int]:
        """Return the artifact's version numbers in ascending order ([] when missing)."""
        return [
            info.version
            for info in await self.list_artifact_versions(
                app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
            )
        ]

    async def list_artifact_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[ArtifactVersion]:
        """Return copies of every version's metadata, oldest first ([] when missing)."""
        location = _scoping.locate(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        return [s.info.model_copy(deep=True) for s in self._store.versions(location)]

    async def get_artifact_version(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> ArtifactVersion | None:
        """Return a copy of one version's metadata (latest when ``version`` is None), or None."""
        location = _scoping.locate(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        stored = self._select(location, version)
        return stored.info.model_copy(deep=True) if stored is not None else None
