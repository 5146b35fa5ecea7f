"""SaveFilesAsArtifactsPlugin: files in the user's message are saved as artifacts."""

from __future__ import annotations

import copy
import logging
import urllib.parse
from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.plugins.base_plugin import BasePlugin

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.agents.context import CallbackContext
    from orchestrator.agents.invocation_context import InvocationContext

logger = logging.getLogger(__name__)

MAX_INLINE_FILE_BYTES = 20 * 1024 * 1024
"""Largest file saved (Gemini's limit for inline data); a larger one is replaced by a note."""
_MODEL_READABLE_SCHEMES = frozenset({"gs", "https", "http"})
"""URI schemes a model can fetch a file from (a file reference is attached only for those)."""


class SaveFilesAsArtifactsPlugin(BasePlugin):
    """Saves each inline file of the user's message as an artifact, and tells the model so.

    The artifact is named by the file's ``display_name`` (``artifact_<invocation>_<index>``
    without one); prefix it with ``user:`` to share it across the user's sessions. A saved
    file is replaced in the message by the text ``[Uploaded Artifact: "<name>"]`` and, when
    ``attach_file_reference`` and the stored version has a URI the model can read (gs://,
    http(s)://), a file-data part pointing at it. Give the agent ``load_artifacts`` (or your
    own tool) to read the files. The first agent to run records the new versions in its
    event's ``artifact_delta``.
    """

    def __init__(
        self, name: str = "save_files_as_artifacts_plugin", *, attach_file_reference: bool = True
    ) -> None:
        super().__init__(name)
        self._attach_file_reference = attach_file_reference

    @property
    def _pending_key(self) -> str:
        return f"{self.name}:pending_delta"

    async def on_user_message_callback(
        self, *, invocation_context: InvocationContext, user_message: types.Content
    ) -> types.Content | None:
        """Save the message's inline files; return the message with placeholders for them."""
        service = invocation_context.artifact_service
        if service is None:
            logger.warning("SaveFilesAsArtifactsPlugin is inactive: the runner has no "
                           "artifact service.")
            return user_message
        if not user_message.parts:
            return None
        parts: list[types.Part] = []
        saved: dict[str, int] = {}
        changed = False
        for index, part in enumerate(user_message.parts):
            if part.inline_data is None:
                parts.append(part)
                continue
            name = part.inline_data.display_name or (
                f"artifact_{invocation_context.invocation_id}_{index}"
            )
            size = len(part.inline_data.data or b"")
            if size > MAX_INLINE_FILE_BYTES:
                message = (
                    f"File {name} ({size / 2**20:.2f} MB) exceeds the maximum supported size "
                    f"of {MAX_INLINE_FILE_BYTES // 2**20}MB. Please upload a smaller file."
                )
                logger.warning(message)
                parts.append(types.Part(text=f"[Upload Error: {message}]"))
                changed = True
                continue
            try:
                version = await service.save_artifact(
                    app_name=invocation_context.app_name,
                    user_id=invocation_context.user_id,
                    session_id=invocation_context.session.id,
                    filename=name,
                    artifact=copy.copy(part),  # later edits of the message do not reach it
                )
            except Exception:  # keep the file in the message rather than lose it
                logger.exception("Saving part %d of the user's message as %r failed", index, name)
                parts.append(part)
                continue
            parts.append(types.Part(text=f'[Uploaded Artifact: "{name}"]'))
            if self._attach_file_reference:
                reference = await self._file_reference(invocation_context, name, version,
                                                       part.inline_data.mime_type)
                if reference is not None:
                    parts.append(reference)
            saved[name] = version
            changed = True
        if not changed:
            return None
        # Kept in the session's state until an agent's callback context can record it.
        state = invocation_context.session.state
        state[self._pending_key] = {**(state.get(self._pending_key) or {}), **saved}
        return types.Content(role=user_message.role, parts=parts)

    async def before_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> types.Content | None:
        """Record the versions saved for the message in the agent's event ``artifact_delta``."""
        pending = callback_context.state.get(self._pending_key)
        if pending:
            try:
                callback_context.actions.artifact_delta.update(pending)
            except (TypeError, ValueError) as error:
                logger.warning("Pending artifact versions %r not recorded: %s", pending, error)
            finally:
                callback_context.state[self._pending_key] = {}
        return None

    async def _file_reference(
        self, ctx: InvocationContext, name: str, version: int, mime_type: str | None
    ) -> types.Part | None:
        """A file-data part for the saved version, if the model can read its URI."""
        assert ctx.artifact_service is not None
        try:
            stored = await ctx.artifact_service.get_artifact_version(
                app_name=ctx.app_name, user_id=ctx.user_id, session_id=ctx.session.id,
                filename=name, version=version,
            )
        except Exception as error:
            logger.warning("Artifact %r version %d not found for a file reference: %s",
                           name, version, error)
            return None
        if stored is None or not _model_readable(stored.canonical_uri):
            return None
        return types.Part(file_data=types.FileData(
            file_uri=stored.canonical_uri,
            mime_type=mime_type or stored.mime_type,
            display_name=name,
        ))


def _model_readable(uri: str | None) -> bool:
    if not uri:
        return False
    try:
        scheme = urllib.parse.urlparse(uri).scheme
    except ValueError:
        return False
    return scheme.lower() in _MODEL_READABLE_SCHEMES
