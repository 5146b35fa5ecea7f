"""google-adk's artifact routes of ``adk api_server``, with its request and response JSON.

Artifacts live in the Redis artifact service the workers and orchestrators write to, so an
artifact a tool saved on a worker is readable here at once. As in ADK, the routes do not
look the session up: an unknown session has no artifacts (an empty list, or 404
``Artifact not found`` for one artifact).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request

from orchestrator.artifacts.base_artifact_service import ArtifactVersion
from orchestrator.distributed.intake import RequestError, check_json
from orchestrator.errors import InputValidationError
from workers.api.adk_routes import _Camel, checked
from workers.api.backend import Backend

router = APIRouter(tags=["artifacts"])

_SESSION = "/apps/{app_name}/users/{user_id}/sessions/{session_id}/artifacts"
_MAX_FILENAME = 1024
"""Longest artifact file name a request may name."""
_LAST_VERSION = 2**63 - 1
"""The highest version there can be: Redis refuses a list index past it (a 500 before)."""


class SaveArtifactRequest(_Camel):
    """ADK's ``SaveArtifactRequest``: a file name, a Part, optional metadata."""

    filename: str
    artifact: dict[str, Any]
    custom_metadata: dict[str, Any] | None = None


def _checked(request: Request, app_name: str, user_id: str, session_id: str,
             filename: str | None = None, field: str = "artifact_name") -> Backend:
    backend = checked(request, app_name, ("user_id", user_id), ("session_id", session_id))
    if filename is not None and (not filename or len(filename) > _MAX_FILENAME
                                 or any(ord(c) < 32 or ord(c) == 127 for c in filename)):
        raise HTTPException(422, f"{field}: must be 1 to {_MAX_FILENAME} characters, "
                                 "without control characters")
    if filename is not None:  # a JSON body's \ud800 escape: no key or URI can be made of it
        try:
            check_json(field, filename, backend.runtime.limits)
        except RequestError as error:
            raise HTTPException(422, str(error)) from None
    return backend


def _where(app_name: str, user_id: str, session_id: str, filename: str) -> dict[str, str]:
    return {"app_name": app_name, "user_id": user_id, "session_id": session_id,
            "filename": filename}


def _version(version_id: str) -> int | None:
    """A version path segment: a number, or ``latest`` (None)."""
    if version_id == "latest":
        return None
    try:
        return int(version_id)
    except ValueError:
        raise HTTPException(422, "Invalid version ID") from None  # ADK's words


def _exists(version: int | None) -> bool:
    """False for a version number no artifact can have (past 64 bits): not found, as in ADK."""
    return version is None or version <= _LAST_VERSION


def _version_json(version: ArtifactVersion) -> dict[str, Any]:
    return version.model_dump(mode="json", by_alias=True, exclude_none=True)


@router.post(_SESSION)
async def save_artifact(request: Request, app_name: str, user_id: str, session_id: str,
                        body: SaveArtifactRequest) -> dict[str, Any]:
    """Save a new version of an artifact; its version's metadata."""
    backend = _checked(request, app_name, user_id, session_id, body.filename, "filename")
    try:
        # The Part is stored as JSON: one that cannot be written (a lone surrogate, NaN) is
        # refused here, naming where, rather than failing the save with a 500.
        check_json("artifact", body.artifact, backend.runtime.limits)
        check_json("custom_metadata", body.custom_metadata, backend.runtime.limits)
    except RequestError as error:
        raise HTTPException(422, str(error)) from None
    artifacts = (await backend.services()).artifacts
    where = _where(app_name, user_id, session_id, body.filename)
    try:
        version = await artifacts.save_artifact(**where, artifact=body.artifact,
                                                custom_metadata=body.custom_metadata)
    except InputValidationError as error:  # 400 and the service's words, as ADK
        raise HTTPException(400, str(error)) from None
    saved = await artifacts.get_artifact_version(**where, version=version)
    if saved is None:  # deleted in between
        raise HTTPException(404, "Artifact version not found")
    return _version_json(saved)


@router.get(_SESSION)
async def list_artifact_names(request: Request, app_name: str, user_id: str,
                              session_id: str) -> list[str]:
    """The names of the session's artifacts and the user's (``user:``) ones, sorted."""
    backend = _checked(request, app_name, user_id, session_id)
    artifacts = (await backend.services()).artifacts
    return await artifacts.list_artifact_keys(app_name=app_name, user_id=user_id,
                                              session_id=session_id)


@router.get(_SESSION + "/{artifact_name}/versions")
async def list_artifact_versions(request: Request, app_name: str, user_id: str, session_id: str,
                                 artifact_name: str) -> list[int]:
    """The artifact's version numbers, oldest first ([] if there is none)."""
    backend = _checked(request, app_name, user_id, session_id, artifact_name)
    artifacts = (await backend.services()).artifacts
    return await artifacts.list_versions(**_where(app_name, user_id, session_id, artifact_name))


@router.get(_SESSION + "/{artifact_name}/versions/metadata")
async def list_artifact_versions_metadata(request: Request, app_name: str, user_id: str,
                                          session_id: str, artifact_name: str) -> list[dict[str, Any]]:
    """The metadata of every version of the artifact, oldest first."""
    backend = _checked(request, app_name, user_id, session_id, artifact_name)
    artifacts = (await backend.services()).artifacts
    found = await artifacts.list_artifact_versions(
        **_where(app_name, user_id, session_id, artifact_name))
    return [_version_json(version) for version in found]


@router.get(_SESSION + "/{artifact_name}/versions/{version_id}/metadata")
async def get_artifact_version_metadata(request: Request, app_name: str, user_id: str,
                                        session_id: str, artifact_name: str,
                                        version_id: str) -> dict[str, Any]:
    """One version's metadata (``latest`` for the newest); 404 if there is none."""
    backend = _checked(request, app_name, user_id, session_id, artifact_name)
    version = _version(version_id)
    artifacts = (await backend.services()).artifacts
    found = await artifacts.get_artifact_version(
        **_where(app_name, user_id, session_id, artifact_name),
        version=version) if _exists(version) else None
    if found is None:
        raise HTTPException(404, "Artifact version not found")
    return _version_json(found)


@router.get(_SESSION + "/{artifact_name}/versions/{version_id}")
async def load_artifact_version(request: Request, app_name: str, user_id: str, session_id: str,
                                artifact_name: str, version_id: str) -> dict[str, Any]:
    """One version of the artifact as a Part (``latest`` for the newest); 404 if none."""
    return await _load(request, app_name, user_id, session_id, artifact_name, _version(version_id))


@router.get(_SESSION + "/{artifact_name:path}")
async def load_artifact(request: Request, app_name: str, user_id: str, session_id: str,
                        artifact_name: str, version: int | None = None) -> dict[str, Any]:
    """The artifact as a Part (its latest version, or ``?version=``); 404 if none."""
    return await _load(request, app_name, user_id, session_id, artifact_name, version)


async def _load(request: Request, app_name: str, user_id: str, session_id: str,
                artifact_name: str, version: int | None) -> dict[str, Any]:
    backend = _checked(request, app_name, user_id, session_id, artifact_name)
    artifacts = (await backend.services()).artifacts
    try:
        part = await artifacts.load_artifact(
            **_where(app_name, user_id, session_id, artifact_name),
            version=version) if _exists(version) else None
    except InputValidationError as error:  # a circular or too long chain of references
        raise HTTPException(400, str(error)) from None
    if part is None:
        raise HTTPException(404, "Artifact not found")
    return part.model_dump(mode="json", by_alias=True, exclude_none=True)


@router.delete(_SESSION + "/{artifact_name:path}")
async def delete_artifact(request: Request, app_name: str, user_id: str, session_id: str,
                          artifact_name: str) -> None:
    """Delete every version of the artifact (nothing if there is none)."""
    backend = _checked(request, app_name, user_id, session_id, artifact_name)
    artifacts = (await backend.services()).artifacts
    await artifacts.delete_artifact(**_where(app_name, user_id, session_id, artifact_name))
