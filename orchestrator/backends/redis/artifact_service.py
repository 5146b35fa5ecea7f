"""An artifact service keeping every version in Redis (distributed mode).

Semantics are those of :class:`InMemoryArtifactService`; scoping, validation and reference
rules come from ``_scoping``. Per artifact location there are two Redis lists (key names in
:mod:`orchestrator.backends.redis.keys`) whose index is the version number:

* ``...:parts`` — the payload of each version as ``types.Part`` JSON (bytes in URL-safe
  base64, as google-genai serialises them);
* ``...:meta`` — ``{"saveId", "customMetadata", "createTime", "mimeType"}`` of each version
  (``saveId``, always first, names the save call; it is never returned to users);

plus a set of file names per scope for ``list_artifact_keys``. A save is one Lua script
(the version is the list length, so concurrent saves from any number of processes get
distinct, gap-free versions); a delete removes both lists and the name in one transaction.
A save run twice (its reply lost, the client sends it again) finds its own ``saveId`` among
the newest versions and replies that version's number instead of adding another.

Canonical URIs use the ``redis://`` scheme with the same path layout as ``memory://``:
``redis://apps/{app}/users/{user}[/sessions/{session}]/artifacts/{filename}/versions/{v}``.
They name the artifact version, not a Redis server (the host part is always ``apps``).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import redis.asyncio as aioredis
from google.genai import types

from orchestrator import failpoints, platform
from orchestrator.artifacts import _scoping
from orchestrator.artifacts._scoping import ArtifactLocation
from orchestrator.artifacts.artifact_util import is_rewind_tombstone
from orchestrator.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService
from orchestrator.artifacts.save_ids import CALL_SAVE_ID
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.codec import dumps, encode_value, loads, text
from orchestrator.backends.redis.connection import RedisClientOwner
from orchestrator.backends.redis.lua import LuaScript, Operands, key_field
from orchestrator.backends.redis.lua_functions import LUA_WRONG_TYPE
from orchestrator.errors import (
    InputValidationError,
    ServiceUnavailableError,
    is_infrastructure_error,
)

P = ParamSpec("P")
R = TypeVar("R")


def _service_call(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Raise Redis being away as :class:`ServiceUnavailableError` (never a tool's own error)."""

    @functools.wraps(method)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            failpoints.hit("artifacts.call")
            return await method(*args, **kwargs)
        except ServiceUnavailableError:
            raise
        except Exception as error:
            if not is_infrastructure_error(error):
                raise
            raise ServiceUnavailableError(
                f"The artifact service could not reach Redis ({type(error).__name__}: {error})"
            ) from error

    return call


URI_SCHEME = "redis"
"""Scheme of the canonical URIs of artifacts stored by :class:`RedisArtifactService`."""


@dataclass(frozen=True, kw_only=True)
class SaveVersion(Operands):
    """Operands of :data:`SAVE`: one new version of an artifact."""

    parts: str = key_field()
    """The artifact's list of payloads (``keys.artifact_parts``)."""
    meta: str = key_field()
    """Its list of version metadata (``keys.artifact_meta``)."""
    names: str = key_field()
    """The file names of its scope (``keys.artifact_names``)."""
    part_json: str
    meta_json: str
    """The version's metadata; starts with ``{"saveId":"<save_id>"``."""
    save_id: str
    """Names this save call: a run that finds it in a newest version adds nothing."""
    lookback: int
    """How many of the newest versions are searched for ``save_id``."""
    filename: str


_SAVE_LOOKBACK = 8
"""Newest versions searched for a save's own id (saves of the same file may land between a
run whose reply was lost and its second run)."""

SAVE = LuaScript(SaveVersion, """
local bad = wrong_type({{parts, 'list'}, {meta, 'list'}, {names, 'set'}})
if bad then return bad end
local version = redis.call('LLEN', meta)
local mark = '{"saveId":"' .. save_id .. '"'
local newest = redis.call('LRANGE', meta, -tonumber(lookback), -1)
for i = #newest, 1, -1 do
  if string.sub(newest[i], 1, #mark) == mark then return version - #newest + i - 1 end
end
redis.call('RPUSH', parts, part_json)
redis.call('RPUSH', meta, meta_json)
redis.call('SADD', names, filename)
return version
""", functions=[LUA_WRONG_TYPE])
"""Save a version; reply: its number. Type checks run before the first write (no partial
saves). Run again with the same ``save_id`` (a lost reply), it replies the first run's
version and writes nothing."""


def _parts_key(location: ArtifactLocation) -> str:
    return keys.artifact_parts(
        location.app_name, location.user_id, location.session_id, location.filename
    )


def _meta_key(location: ArtifactLocation) -> str:
    return keys.artifact_meta(
        location.app_name, location.user_id, location.session_id, location.filename
    )


def _names_key(location: ArtifactLocation) -> str:
    return keys.artifact_names(location.app_name, location.user_id, location.session_id)


def _version_info(location: ArtifactLocation, version: int, raw: str | bytes) -> ArtifactVersion:
    """Rebuild a version's metadata from its stored JSON and its position in the list."""
    meta = loads(raw)  # its "saveId" is the project's own: not returned
    return ArtifactVersion(
        version=version,
        canonical_uri=location.uri(URI_SCHEME, version),
        custom_metadata=meta.get("customMetadata") or {},
        create_time=meta["createTime"],
        mime_type=meta.get("mimeType"),
    )


class RedisArtifactService(RedisClientOwner, BaseArtifactService):
    """Artifacts held in Redis; canonical URIs use the ``redis://`` scheme.

    Pass a ``redis_url`` (the service opens and owns a client; close it with :meth:`aclose`)
    or an existing ``redis.asyncio.Redis`` ``client`` (the caller keeps ownership). With
    neither, ``ADK_CELERY_REDIS_URL`` from the settings is used. ``custom_metadata`` must be
    JSON-serialisable. ``file_data`` parts whose URI is an ``artifact://`` reference are
    resolved to the referenced artifact's payload on load.
    """

    def __init__(
        self, redis_url: str | None = None, *, client: aioredis.Redis | None = None
    ) -> None:
        RedisClientOwner.__init__(self, redis_url, client=client)
        self._save_script = SAVE.register(self._client)

    @_service_call
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
        """Save a new version of ``filename`` atomically and return its number (first is 0)."""
        location = _scoping.locate(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        part = _scoping.coerce_part(artifact, location, session_id)
        # A tool's save carries its call's id: a second run of the call finds it (save_ids).
        save_id = CALL_SAVE_ID.get() or uuid.uuid4().hex
        meta = {
            "saveId": save_id,  # first: SAVE looks for it at the start of the JSON
            "customMetadata": {
                str(key): loads(encode_value(value, what=f"custom_metadata key {key!r}"))
                for key, value in (custom_metadata or {}).items()
            },
            "createTime": platform.get_time(),
            "mimeType": _scoping.detect_mime_type(part),
        }
        version = await self._save_script(SaveVersion(
            parts=_parts_key(location), meta=_meta_key(location), names=_names_key(location),
            part_json=part.model_dump_json(exclude_none=True), meta_json=dumps(meta),
            save_id=save_id, lookback=_SAVE_LOOKBACK, filename=location.filename))
        return int(version)

    @_service_call
    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> types.Part | None:
        """Return a version (latest when ``version`` is None), or None if missing."""
        location = _scoping.locate(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        seen: set[tuple[ArtifactLocation, int]] = set()
        while True:
            found = await self._read(_parts_key(location), version)
            if found is None:
                return None
            number, raw = found
            if (location, number) in seen:
                raise InputValidationError(
                    f"Circular artifact reference through "
                    f"{location.artifact_ref_uri(number)!r}."
                )
            seen.add((location, number))
            part = types.Part.model_validate_json(raw)
            target = _scoping.follow_reference(part, location, session_id, len(seen) - 1)
            if target is None:
                return None if is_rewind_tombstone(part) else part
            location, version = target
            session_id = location.session_id  # past a reference: the named artifact's session

    async def _read(self, list_key: str, version: int | None) -> tuple[int, Any] | None:
        """Return ``(version, stored item)`` from a per-version list, or None if missing."""
        if version is None:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.llen(list_key)
                pipe.lindex(list_key, -1)
                count, raw = await pipe.execute()
            return (int(count) - 1, raw) if raw is not None else None
        if version < 0:
            return None
        raw = await self._client.lindex(list_key, version)
        return (version, raw) if raw is not None else None

    @_service_call
    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str | None = None
    ) -> list[str]:
        """Return the sorted filenames of the session's (when given) and the user's artifacts."""
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.smembers(keys.artifact_names(app_name, user_id, None))
            if session_id:
                pipe.smembers(keys.artifact_names(app_name, user_id, session_id))
            replies = await pipe.execute()
        return sorted({text(name) for names in replies for name in names})

    @_service_call
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
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(_parts_key(location), _meta_key(location))
            pipe.srem(_names_key(location), location.filename)
            await pipe.execute()

    @_service_call
    async def list_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[int]:
        """Return the artifact's version numbers in ascending order ([] when missing)."""
        location = _scoping.locate(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        return list(range(await self._client.llen(_meta_key(location))))

    @_service_call
    async def list_artifact_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[ArtifactVersion]:
        """Return every version's metadata, oldest first ([] when missing); no payloads read."""
        location = _scoping.locate(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        raw = await self._client.lrange(_meta_key(location), 0, -1)
        return [_version_info(location, number, item) for number, item in enumerate(raw)]

    @_service_call
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
        location = _scoping.locate(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        found = await self._read(_meta_key(location), version)
        return _version_info(location, *found) if found is not None else None
