"""Storage-independent artifact rules: scopes, paths, URIs, payload checks, mime types.

Everything here is pure (no I/O, no service state), so any artifact service (in-memory,
Redis-backed, ...) can share the same validation and naming logic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.genai import types
from pydantic import ValidationError

from orchestrator.errors import InputValidationError

USER_SCOPE_PREFIX = "user:"
"""Filenames starting with this prefix are shared by all sessions of a user."""

ARTIFACT_REF_SCHEME = "artifact"
"""URI scheme of a ``file_data`` part that points at another stored artifact."""

TEXT_MIME_TYPE = "text/plain"
"""Mime type recorded for ``text`` parts."""

_ARTIFACT_URI_RE = re.compile(
    r"^artifact://apps/(?P<app>[^/]+)/users/(?P<user>[^/]+)"
    r"(?:/sessions/(?P<session>[^/]+))?"
    r"/artifacts/(?P<filename>.+)/versions/(?P<version>\d+)$"
)


def is_user_scoped(filename: str) -> bool:
    """Return True when ``filename`` names a user-scoped (cross-session) artifact."""
    return filename.startswith(USER_SCOPE_PREFIX)


@dataclass(frozen=True, slots=True)
class ArtifactLocation:
    """Where an artifact lives: app, user, session (None when user-scoped) and filename."""

    app_name: str
    user_id: str
    session_id: str | None
    filename: str

    @property
    def path(self) -> str:
        """The scheme-less path ``apps/{app}/users/{user}[/sessions/{sid}]/artifacts/{f}``."""
        session = f"/sessions/{self.session_id}" if self.session_id is not None else ""
        return f"apps/{self.app_name}/users/{self.user_id}{session}/artifacts/{self.filename}"

    def uri(self, scheme: str, version: int) -> str:
        """Return ``{scheme}://{path}/versions/{version}`` for one version of the artifact."""
        return f"{scheme}://{self.path}/versions/{version}"

    def artifact_ref_uri(self, version: int) -> str:
        """Return the ``artifact://`` reference URI of one version of the artifact."""
        return self.uri(ARTIFACT_REF_SCHEME, version)


def locate(
    *, app_name: str, user_id: str, filename: str, session_id: str | None
) -> ArtifactLocation:
    """Check the arguments of a per-file call and return where the artifact lives.

    ``user:`` files ignore ``session_id``; any other file requires one. Raises
    ``InputValidationError`` when an argument is empty or a session file has no session id.
    """
    if not app_name:
        raise InputValidationError("app_name is required to address an artifact.")
    if not user_id:
        raise InputValidationError("user_id is required to address an artifact.")
    if not filename:
        raise InputValidationError("filename is required to address an artifact.")
    if is_user_scoped(filename):
        return ArtifactLocation(app_name, user_id, None, filename)
    if not session_id:
        raise InputValidationError(
            f"Artifact {filename!r} is session-scoped, so a session_id is required; "
            f"prefix the filename with {USER_SCOPE_PREFIX!r} to share it across the "
            "user's sessions."
        )
    return ArtifactLocation(app_name, user_id, session_id, filename)


def parse_artifact_uri(uri: str) -> tuple[ArtifactLocation, int] | None:
    """Parse an ``artifact://`` reference into its location and version; None if malformed."""
    match = _ARTIFACT_URI_RE.match(uri)
    if match is None:
        return None
    location = ArtifactLocation(
        app_name=match["app"],
        user_id=match["user"],
        session_id=match["session"],
        filename=match["filename"],
    )
    if (location.session_id is None) != is_user_scoped(location.filename):
        return None
    return location, int(match["version"])


def artifact_ref_of(part: types.Part) -> str | None:
    """Return the ``artifact://`` URI when ``part`` references another stored artifact."""
    uri = part.file_data.file_uri if part.file_data is not None else None
    if uri and uri.startswith(f"{ARTIFACT_REF_SCHEME}://"):
        return uri
    return None


MAX_REFERENCE_HOPS = 5
"""How many ``artifact://`` references one load follows (as google-adk): a longer chain is
refused, so a load always ends."""


def referenced(
    part: types.Part, owner: ArtifactLocation, session_id: str | None
) -> tuple[ArtifactLocation, int] | None:
    """Where ``part`` points (location, version) if it is an ``artifact://`` reference.

    ``owner`` is the artifact that holds it, ``session_id`` the session the reference is
    read in (the caller's session; past a first reference, the session of the artifact
    that held it). A reference must be well formed and name an artifact of the same app
    and user, and a session's artifact only of that session (a reference never reads what
    its reader may not: another session's files), else ``InputValidationError``. Checked
    when saved; stores check again each time they follow one.
    """
    ref = artifact_ref_of(part)
    if ref is None:
        return None
    parsed = parse_artifact_uri(ref)
    if parsed is None:
        raise InputValidationError(f"Invalid artifact reference URI: {ref!r}.")
    target = parsed[0]
    if (target.app_name, target.user_id) != (owner.app_name, owner.user_id):
        raise InputValidationError(
            f"Artifact reference {ref!r} points outside app {owner.app_name!r} and user "
            f"{owner.user_id!r}: a reference may only name an artifact of the same app and "
            "user.")
    if target.session_id is not None and target.session_id != session_id:
        raise InputValidationError(
            f"Artifact reference {ref!r} points outside session {session_id!r}: a reference "
            "may only name an artifact of the same session, or one of the user's (user:).")
    return parsed


def follow_reference(
    part: types.Part, owner: ArtifactLocation, session_id: str | None, hops: int
) -> tuple[ArtifactLocation, int] | None:
    """:func:`referenced` for a load that has followed ``hops`` references already.

    Past :data:`MAX_REFERENCE_HOPS`, ``InputValidationError``.
    """
    target = referenced(part, owner, session_id)
    if target is not None and hops >= MAX_REFERENCE_HOPS:
        raise InputValidationError(
            f"Artifact {owner.filename!r} is reached through more than {MAX_REFERENCE_HOPS} "
            "artifact references; a load follows at most that many.")
    return target


def coerce_part(
    artifact: types.Part | Mapping[str, Any], location: ArtifactLocation, session_id: str | None
) -> types.Part:
    """Validate an artifact payload for ``location`` and return a private deep copy of it.

    Accepted payloads: ``inline_data``, ``text`` and ``file_data`` (an ``artifact://``
    reference, saved in session ``session_id``: see :func:`referenced`). Raises
    ``InputValidationError`` when the payload is not a Part (or a dict valid as one), or
    carries none of those fields.
    """
    if isinstance(artifact, types.Part):
        part = artifact.model_copy(deep=True)
    elif isinstance(artifact, Mapping):
        try:
            part = types.Part.model_validate(dict(artifact)).model_copy(deep=True)
        except ValidationError as exc:
            raise InputValidationError(f"Invalid artifact payload: {exc}") from exc
    else:
        raise InputValidationError(
            f"An artifact must be a types.Part or a dict, not {type(artifact).__name__}."
        )
    if part.inline_data is None and part.text is None and part.file_data is None:
        raise InputValidationError(
            # google-adk's sentence first (its api_server shows it), then what is accepted.
            "Not supported artifact type. The part must carry inline_data, text or file_data."
        )
    referenced(part, location, session_id)
    return part


def detect_mime_type(part: types.Part) -> str | None:
    """Return the mime type of an artifact part (``text/plain`` for text), if known."""
    if part.inline_data is not None:
        return part.inline_data.mime_type
    if part.text is not None:
        return TEXT_MIME_TYPE
    if part.file_data is not None:
        # A reference's type is its target's, known only when it is read (google-adk: None).
        return None if artifact_ref_of(part) else part.file_data.mime_type
    return None


def select_version(version_count: int, version: int | None) -> int | None:
    """Return the version to read among ``0..version_count-1`` (latest when None), or None."""
    if version_count <= 0:
        return None
    if version is None:
        return version_count - 1
    return version if 0 <= version < version_count else None
