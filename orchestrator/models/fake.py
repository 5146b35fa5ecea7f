"""Fake models shipped with the product: scripted answers, or answers from a function.

A script item describes one model call. It may be:
- ``str``: a text answer;
- ``types.Part`` or ``list[types.Part]``: one model content;
- ``types.Content`` or ``LlmResponse``: used as given;
- ``Chunks([...])``: a streamed answer, each element one of the above; every chunk but the last
  is marked partial when the call is streamed (the last is the aggregate).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, Union

from google.genai import types
from pydantic import Field, PrivateAttr

from orchestrator.models.base_llm import BaseLlm
from orchestrator.models.llm_request import LlmRequest
from orchestrator.models.llm_response import LlmResponse


class Chunks(list):  # type: ignore[type-arg]
    """A streamed answer: partial chunks followed by the final aggregate."""


ScriptItem = Union[str, types.Part, list[types.Part], types.Content, LlmResponse, Chunks]

_USAGE = types.GenerateContentResponseUsageMetadata(
    prompt_token_count=0, candidates_token_count=0, total_token_count=0
)


def to_llm_response(item: Any) -> LlmResponse:
    """Turn one script item (not ``Chunks``) into an LlmResponse."""
    # Copies, so the flow can stamp call ids without touching the script's own objects.
    if isinstance(item, LlmResponse):
        return item.model_copy(deep=True)
    if isinstance(item, str):
        content = types.Content(role="model", parts=[types.Part(text=item)])
    elif isinstance(item, types.Part):
        content = types.Content(role="model", parts=[item.model_copy(deep=True)])
    elif isinstance(item, types.Content):
        content = item.model_copy(deep=True)
    elif isinstance(item, Sequence) and all(isinstance(p, types.Part) for p in item):
        content = types.Content(role="model", parts=[p.model_copy(deep=True) for p in item])
    else:
        raise TypeError(f"Unsupported fake-model script item: {item!r}")
    return LlmResponse(content=content, usage_metadata=_USAGE)


def _responses_for_call(item: Any, stream: bool) -> list[LlmResponse]:
    if not isinstance(item, Chunks):
        return [to_llm_response(item)]
    responses = [to_llm_response(chunk) for chunk in item]
    if stream:
        for response in responses[:-1]:
            response.partial = True
        return responses
    return responses[-1:]


class _RecordingLlm(BaseLlm):
    """Shared base: records every request it receives (and never edits one)."""

    requests: list[LlmRequest] = Field(default_factory=list, exclude=True)
    """Every request received, oldest first (when ``record_requests``)."""
    record_requests: bool = True
    """Keep requests in ``requests``; turn off in long-running processes (memory)."""

    def _record(self, llm_request: LlmRequest) -> None:
        if self.record_requests:
            self.requests.append(llm_request)

    @classmethod
    def supported_models(cls) -> list[str]:
        return []


class ScriptedLlm(_RecordingLlm):
    """A model that answers each call with the next item of a script."""

    model: str = "scripted"
    responses: list[Any] = Field(default_factory=list)
    """The script: one item per model call (see the module docstring)."""
    _cursor: int = PrivateAttr(default=0)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Yield the next scripted answer."""
        self._record(llm_request)
        if self._cursor >= len(self.responses):
            raise RuntimeError(
                f"ScriptedLlm {self.model!r} ran out of responses after {self._cursor} calls."
            )
        item = self.responses[self._cursor]
        self._cursor += 1
        for response in _responses_for_call(item, stream):
            yield response

    @property
    def call_count(self) -> int:
        """How many times the model was called."""
        return self._cursor


ResponseFn = Callable[[LlmRequest], Union[Any, Awaitable[Any]]]


class FunctionLlm(_RecordingLlm):
    """A model whose answer to each call is computed by a function of the request."""

    model: str = "function"
    fn: ResponseFn
    """``fn(llm_request)`` returns a script item (sync or async); it reads the request, it
    must not edit it in place (its history is shared with the session's events)."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Yield the answer computed by ``fn``."""
        self._record(llm_request)
        item = self.fn(llm_request)
        if inspect.isawaitable(item):
            item = await item
        for response in _responses_for_call(item, stream):
            yield response
