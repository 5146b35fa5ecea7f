"""What a model can do, as the flow asks it (google-adk's ``LlmCapabilities``).

One capability so far: whether a request may carry a response schema and function tools
together. When it may not, an agent with both an ``output_schema`` and tools gets its
structured answer through the ``set_model_response`` tool instead (see
:mod:`orchestrator.flows.output_schema`).
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.models.model_names import is_gemini_model


def _genai_flag(name: str) -> bool:
    """A google-genai boolean variable, read as google-genai reads it ('true' or '1')."""
    return os.environ.get(name, "").lower() in ("true", "1")


def vertex_ai_selected() -> bool:
    """True if the environment selects Vertex AI for google-genai clients.

    ``GOOGLE_GENAI_USE_ENTERPRISE`` if set, else the older ``GOOGLE_GENAI_USE_VERTEXAI``.
    """
    if "GOOGLE_GENAI_USE_ENTERPRISE" in os.environ:
        return _genai_flag("GOOGLE_GENAI_USE_ENTERPRISE")
    return _genai_flag("GOOGLE_GENAI_USE_VERTEXAI")


def gemini_output_schema_and_tools(model_name: str) -> bool:
    """True if ``model_name`` is a Gemini model served by Vertex AI (as the environment says).

    Vertex AI's Gemini accepts a response schema beside function declarations; the Gemini
    API does not (google-adk 2.13 decides the same way).
    """
    return vertex_ai_selected() and is_gemini_model(model_name)


class LlmCapabilities(BaseModel):
    """A model's capabilities, computed afresh each time ``BaseLlm.capabilities`` is read.

    Frozen: to change one, subclass the model and override ``capabilities``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    output_schema_and_tools: bool = Field(
        default=False,
        description="Whether the model can use an output schema together with tools.",
    )
