"""load_artifacts: the model asks for saved artifacts, which the next request carries."""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator.tools._artifact_parts import as_safe_part_for_llm
from orchestrator.tools.base_tool import BaseTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext
    from orchestrator.models.llm_request import LlmRequest

logger = logging.getLogger(__name__)

__all__ = ["LoadArtifactsTool", "ProcessArtifactCallback", "as_safe_part_for_llm",
           "load_artifacts_tool"]

ProcessArtifactCallback = Callable[
    [types.Part, str], "types.Part | None | Awaitable[types.Part | None]"
]
"""``(artifact, artifact_name) -> part or None`` (sync or async): what the model gets."""

_USER_PREFIX = "user:"
_DESCRIPTION = (
    "Load saved artifacts (files such as the user's uploads) so that you can read them. "
    "Their content comes with the next request."
)
_STATUS = (
    "The artifacts' content is in the request that follows, for that request only: "
    "call load_artifacts again to read them another time."
)


def _listing_instruction(names: list[str]) -> str:
    return (
        f"Artifacts available in this session: {json.dumps(names)}\n"
        "To answer anything about one of them, call load_artifacts with its name first, "
        "every time, even if you loaded it before: do not rely on earlier answers about it."
    )


def _is_name_list(value: Any) -> bool:
    return (
        isinstance(value, Sequence) and not isinstance(value, (str, bytes))
        and all(isinstance(name, str) for name in value)
    )


def _listed_name(requested: str, listed: set[str]) -> str | None:
    """The listed artifact the model means, or None; the model's text is never trusted.

    A model often drops (or adds) the ``user:`` prefix of a user-scoped artifact.
    """
    if requested in listed:
        return requested
    if requested.startswith(_USER_PREFIX):
        return requested if requested.removeprefix(_USER_PREFIX) in listed else None
    return f"{_USER_PREFIX}{requested}" if f"{_USER_PREFIX}{requested}" in listed else None


class LoadArtifactsTool(BaseTool):
    """Lists the session's artifacts to the model and hands it the ones it asks for.

    Calling the tool only names the artifacts; on the next model call their parts follow the
    function response in that request (never stored in the session). By default each part is
    made safe for Gemini (``as_safe_part_for_llm``); ``process_artifact`` replaces that (return
    None to leave an artifact out; an exception leaves it out and is logged).
    """

    def __init__(
        self,
        *,
        process_artifact: ProcessArtifactCallback | None = None,
        enable_spreadsheet_parsing: bool = False,
    ) -> None:
        super().__init__(name="load_artifacts", description=_DESCRIPTION)
        self._process_artifact = process_artifact
        self._enable_spreadsheet_parsing = enable_spreadsheet_parsing

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        """One parameter, ``artifact_names``: a list of strings."""
        return types.FunctionDeclaration(
            name=self.name,
            description=self.description,
            parameters_json_schema={
                "type": "object",
                "properties": {
                    "artifact_names": {"type": "array", "items": {"type": "string"}},
                },
            },
        )

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """Echo the names asked for; the content itself goes into the next request."""
        names = args.get("artifact_names", [])
        if not _is_name_list(names):
            return {
                "error": "'artifact_names' must be a list of strings.",
                "error_code": "INVALID_ARGUMENTS",
            }
        return {"artifact_names": list(names), "status": _STATUS}

    async def process_llm_request(
        self, *, tool_context: ToolContext, llm_request: LlmRequest
    ) -> None:
        """Declare the tool, list the artifacts, and attach those the model just asked for."""
        await super().process_llm_request(tool_context=tool_context, llm_request=llm_request)
        names = await tool_context.list_artifacts()
        if not names:
            return
        llm_request._append_dynamic_instructions([_listing_instruction(names)])
        if not llm_request.contents or not llm_request.contents[-1].parts:
            return
        listed = set(names)
        for part in llm_request.contents[-1].parts:
            answer = part.function_response
            if answer is None or answer.name != self.name:
                continue
            requested = (answer.response or {}).get("artifact_names", [])
            if not _is_name_list(requested):
                logger.warning("load_artifacts: ignoring an answer whose artifact_names is not "
                               "a list of strings")
                continue
            for name in requested:
                await self._attach(tool_context, llm_request, name, listed)

    async def _attach(
        self, tool_context: ToolContext, llm_request: LlmRequest, requested: str, listed: set[str]
    ) -> None:
        name = _listed_name(requested, listed)
        if name is None:
            logger.warning("load_artifacts: %r is not an artifact of this session", requested)
            return
        artifact = await tool_context.load_artifact(name)
        if artifact is None and not name.startswith(_USER_PREFIX):
            # Listed under its bare name, saved in the user's scope.
            name = f"{_USER_PREFIX}{name}"
            artifact = await tool_context.load_artifact(name)
        if artifact is None:
            logger.warning("load_artifacts: %r could not be loaded", name)
            return
        part: types.Part | None
        if self._process_artifact is not None:
            try:
                result = self._process_artifact(artifact, name)
                part = await result if inspect.isawaitable(result) else result
            except Exception:  # a callback's failure leaves this artifact out, not the turn
                logger.exception("load_artifacts: process_artifact failed on %r", name)
                return
        else:
            part = as_safe_part_for_llm(artifact, requested, self._enable_spreadsheet_parsing)
        if part is None:
            return
        llm_request.contents.append(types.Content(
            role="user", parts=[types.Part(text=f"Content of artifact {requested}:"), part]
        ))


load_artifacts_tool = LoadArtifactsTool()
"""The shared instance (``orchestrator.tools.load_artifacts``)."""
