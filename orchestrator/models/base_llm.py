"""BaseLlm: the one interface every model implementation provides."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from orchestrator.models.llm_request import LlmRequest
from orchestrator.models.llm_response import LlmResponse


class BaseLlm(BaseModel):
    """A model. Subclasses implement ``generate_content_async``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str
    """The model name, e.g. ``gemini-2.5-flash``."""

    keeps_request_contents: ClassVar[bool] = False
    """True for a model known never to edit ``llm_request.contents`` in place. Any other
    model is handed its own copies of the history (as google-adk hands every request), so an
    edit cannot reach the session's events or a later request."""

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
