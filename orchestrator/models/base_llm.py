"""BaseLlm: the one interface every model implementation provides."""

from __future__ import annotations

import warnings
from collections.abc import AsyncGenerator

from pydantic import BaseModel, ConfigDict

from orchestrator.models._capabilities import LlmCapabilities, gemini_output_schema_and_tools
from orchestrator.models.llm_request import LlmRequest
from orchestrator.models.llm_response import LlmResponse


class BaseLlm(BaseModel):
    """A model. Subclasses implement ``generate_content_async``.

    A model reads its request and does not edit ``llm_request.contents`` in place: those
    are the session's own contents, shared with later requests (callbacks, which may edit
    them, are handed copies).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str
    """The model name, e.g. ``gemini-2.5-flash``."""

    @property
    def capabilities(self) -> LlmCapabilities:
        """What this model can do; override (as a plain property) to declare it.

        Not overridden, it is guessed from the name as google-adk 2.13 guesses it: a response
        schema beside tools only for a Gemini model when the environment selects Vertex AI
        (with a ``FutureWarning``, google-adk's, asking to declare it).
        """
        return LlmCapabilities(output_schema_and_tools=self._legacy_output_schema_and_tools())

    def _legacy_output_schema_and_tools(self) -> bool:
        if not gemini_output_schema_and_tools(self.model):
            return False
        warnings.warn(
            f"{type(self).__name__} declares no capabilities: output_schema_and_tools is "
            f"guessed from the model name {self.model!r} (a Gemini model on Vertex AI). "
            "Override BaseLlm.capabilities to declare it.",
            FutureWarning,
            stacklevel=3,
        )
        return True

    @classmethod
    def supported_models(cls) -> list[str]:
        """Return regexes of model names this class serves (used by the registry)."""
        return []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Yield one response, or with ``stream=True`` partial chunks then an aggregate."""
        raise NotImplementedError(f"{type(self).__name__} does not implement generate_content_async")
        yield  # pragma: no cover  (makes this an async generator)
