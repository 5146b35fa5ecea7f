"""LlmResponse: one (possibly partial) answer from a model."""

from __future__ import annotations

from typing import Any

from google.genai import types
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class LlmResponse(BaseModel):
    """A model response: content plus provider metadata; the base class of ``Event``."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        ser_json_bytes="base64",
        val_json_bytes="base64",
    )

    model_version: str | None = None
    content: types.Content | None = None
    grounding_metadata: types.GroundingMetadata | None = None
    partial: bool | None = None
    """A streaming fragment: never persisted, never runs tools."""
    turn_complete: bool | None = None
    finish_reason: types.FinishReason | None = None
    error_code: str | None = None
    error_message: str | None = None
    interrupted: bool | None = None
    custom_metadata: dict[str, Any] | None = None
    usage_metadata: types.GenerateContentResponseUsageMetadata | None = None
    avg_logprobs: float | None = None
    logprobs_result: types.LogprobsResult | None = None
    citation_metadata: types.CitationMetadata | None = None
    interaction_id: str | None = None

    def get_function_calls(self) -> list[types.FunctionCall]:
        """Return every function call in ``content.parts``, in order."""
        if not self.content or not self.content.parts:
            return []
        return [p.function_call for p in self.content.parts if p.function_call]

    def get_function_responses(self) -> list[types.FunctionResponse]:
        """Return every function response in ``content.parts``, in order."""
        if not self.content or not self.content.parts:
            return []
        return [p.function_response for p in self.content.parts if p.function_response]

    def has_trailing_code_execution_result(self) -> bool:
        """Return True if the last part is a code-execution result."""
        if not self.content or not self.content.parts:
            return False
        return self.content.parts[-1].code_execution_result is not None

    @classmethod
    def create(cls, response: types.GenerateContentResponse) -> LlmResponse:
        """Build from a google-genai response, mapping blocked/empty answers to error codes."""
        usage = response.usage_metadata
        if response.candidates:
            candidate = response.candidates[0]
            if (candidate.content and candidate.content.parts) or (
                candidate.finish_reason == types.FinishReason.STOP
            ):
                return cls(
                    content=candidate.content,
                    grounding_metadata=candidate.grounding_metadata,
                    usage_metadata=usage,
                    finish_reason=candidate.finish_reason,
                    citation_metadata=candidate.citation_metadata,
                    avg_logprobs=candidate.avg_logprobs,
                    logprobs_result=candidate.logprobs_result,
                    model_version=response.model_version,
                )
            return cls(
                error_code=str(candidate.finish_reason.value) if candidate.finish_reason else None,
                error_message=candidate.finish_message,
                usage_metadata=usage,
                finish_reason=candidate.finish_reason,
                model_version=response.model_version,
            )
        if response.prompt_feedback:
            feedback = response.prompt_feedback
            return cls(
                error_code=str(feedback.block_reason.value) if feedback.block_reason else None,
                error_message=feedback.block_reason_message,
                usage_metadata=usage,
                model_version=response.model_version,
            )
        return cls(
            content=types.Content(role="model", parts=[]),
            usage_metadata=usage,
            model_version=response.model_version,
        )
