"""BaseLlm: the one interface every model implementation provides."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from pydantic import BaseModel, ConfigDict

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
