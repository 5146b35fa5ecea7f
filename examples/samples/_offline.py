"""What the samples' offline models share: reading a request, and choosing the model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.genai import types

from config import get_settings
from orchestrator.models.fake import FunctionLlm
from orchestrator.models.llm_request import LlmRequest

GEMINI = "gemini-2.5-flash"


def model_or_offline(offline: Callable[[LlmRequest], Any]) -> Any:
    """Gemini when an API key is configured, else ``offline`` as a deterministic model.

    The offline model carries Gemini's model name, so that Gemini's built-in tools (which
    google-adk offers to Gemini models only) are sent to it as they would be to Gemini.
    """
    if get_settings().google_api_key:
        return GEMINI
    return FunctionLlm(model=GEMINI, fn=offline, record_requests=False)


def last_user_text(request: LlmRequest) -> str:
    """The text of the last user turn that is not a function response."""
    for content in reversed(request.contents):
        if content.role == "user":
            texts = [p.text for p in content.parts or [] if p.text]
            if texts:
                return " ".join(texts)
    return ""


def answers(request: LlmRequest) -> dict[str, Any]:
    """The function responses in the request, by function name (the latest wins)."""
    return {
        p.function_response.name: p.function_response.response
        for c in request.contents for p in c.parts or [] if p.function_response
    }


def call(name: str, **args: Any) -> types.Part:
    """A function call part, as a model answers with."""
    return types.Part(function_call=types.FunctionCall(name=name, args=args))
