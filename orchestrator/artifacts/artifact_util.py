"""What a session rewind saves in place of an artifact that did not exist before it.

A rewind cannot delete versions saved after its point (they stay in the artifact's
history), so it saves a marker as a new version, and every artifact service loads a version
holding the marker as absent. The marker is google-adk's, an empty
``application/octet-stream`` payload, so sessions rewound by either runtime read alike (an
artifact saved with exactly that content loads as absent too).
"""

from __future__ import annotations

from google.genai import types

_TOMBSTONE = types.Part(inline_data=types.Blob(mime_type="application/octet-stream", data=b""))


def new_rewind_tombstone() -> types.Part:
    """A fresh copy of the marker a rewind saves to make an artifact absent."""
    return _TOMBSTONE.model_copy(deep=True)


def is_rewind_tombstone(part: types.Part) -> bool:
    """True if ``part`` is the marker of :func:`new_rewind_tombstone`."""
    return part == _TOMBSTONE
