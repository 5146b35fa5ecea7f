"""Models, importable as from google-adk's ``google.adk.models``.

``Gemini`` loads on first use: it brings the google-genai client and the settings.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from orchestrator.models._capabilities import LlmCapabilities
from orchestrator.models.base_llm import BaseLlm
from orchestrator.models.llm_request import LlmRequest
from orchestrator.models.llm_response import LlmResponse
from orchestrator.models.registry import LLMRegistry

if TYPE_CHECKING:
    from orchestrator.models.gemini import Gemini

__all__ = ["BaseLlm", "Gemini", "LLMRegistry", "LlmCapabilities", "LlmRequest", "LlmResponse"]


def __getattr__(name: str) -> Any:
    """``Gemini``, imported on first use."""
    if name == "Gemini":
        return importlib.import_module("orchestrator.models.gemini").Gemini
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
