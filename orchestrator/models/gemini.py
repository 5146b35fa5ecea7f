"""Gemini: the real model, on the google-genai client (Gemini Developer API)."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from google import genai
from google.genai import types
from pydantic import PrivateAttr, SecretStr

from orchestrator.errors import GeminiConfigurationError
from orchestrator.models._capabilities import LlmCapabilities
from orchestrator.models.base_llm import BaseLlm
from orchestrator.models.guard import check_model_requests_allowed
from orchestrator.models.llm_request import LlmRequest
from orchestrator.models.llm_response import LlmResponse
from orchestrator.models.registry import LLMRegistry
from orchestrator.process_setup import core_defaults


class _ClientCache:
    """One google-genai client per event loop; copies and pickles start empty.

    A client's async HTTP connections belong to the loop that opened them, and the sync
    ``Runner.run`` drives each call on a fresh ``asyncio.run``; so clients are cached per loop
    and each is closed while its loop shuts down (``loop.shutdown_asyncgens``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[genai.Client, AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()

    def __copy__(self) -> _ClientCache:
        return _ClientCache()

    def __deepcopy__(self, memo: dict[int, Any]) -> _ClientCache:
        return _ClientCache()

    def __reduce__(self) -> tuple[type[_ClientCache], tuple[()]]:
        return (_ClientCache, ())

    async def get(self, build: Callable[[], genai.Client]) -> genai.Client:
        """Return the running loop's client, building it with ``build`` on first use."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._by_loop.get(loop)
        if entry is not None:
            return entry[0]
        client = build()
        closer = _close_at_loop_shutdown(client)
        await closer.asend(None)  # now registered with this loop's shutdown_asyncgens()
        with self._lock:
            self._by_loop[loop] = (client, closer)
        return client


async def _close_at_loop_shutdown(client: genai.Client) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await client.aio.aclose()


class Gemini(BaseLlm):
    """A Gemini model reached through ``google.genai.Client`` (async API).

    Unset ``api_key`` / ``base_url`` fall back to the process settings
    (``ADK_CELERY_GOOGLE_API_KEY`` or ``GOOGLE_API_KEY``, and ``ADK_CELERY_GEMINI_BASE_URL``).
    """

    model: str = "gemini-2.5-flash"
    api_key: SecretStr | None = None
    """Gemini API key; defaults to the process's (``configure_core``), else ``GOOGLE_API_KEY``."""
    base_url: str | None = None
    """Endpoint override (a proxy, or a local stub); defaults to the process's ``gemini_base_url``."""
    retry_options: types.HttpRetryOptions | None = None
    """HTTP retry policy of the client; None means the client does not retry."""

    _clients: _ClientCache = PrivateAttr(default_factory=_ClientCache)

    @property
    def capabilities(self) -> LlmCapabilities:
        """No response schema beside tools: this client always talks to the Gemini API.

        (google-adk's ``Gemini`` allows it when the environment selects Vertex AI, which
        this class never uses.)
        """
        return LlmCapabilities(output_schema_and_tools=False)

    @classmethod
    def supported_models(cls) -> list[str]:
        """Return the model-name regexes served by Gemini."""
        return [
            r"gemini-.*",
            r"model-optimizer-.*",
            r"projects/.+/locations/.+/endpoints/.+",
            r"projects/.+/locations/.+/publishers/google/models/gemini.+",
        ]

    async def api_client(self) -> genai.Client:
        """Return this instance's google-genai client for the running loop, built on first use."""
        return await self._clients.get(self._build_client)

    def _build_client(self) -> genai.Client:
        defaults = core_defaults()
        api_key = self.api_key or defaults.api_key()
        key = api_key.get_secret_value().strip() if api_key is not None else ""
        if not key:
            raise GeminiConfigurationError(
                f"No Gemini API key configured for model {self.model!r}: set the "
                "GOOGLE_API_KEY environment variable (ADK_CELERY_GOOGLE_API_KEY for adk-celery's "
                "processes), "
                "or pass api_key= to Gemini(...)."
            )
        http_options = types.HttpOptions(
            base_url=self.base_url or defaults.gemini_base_url,
            retry_options=self.retry_options,
        )
        return genai.Client(api_key=key, vertexai=False, http_options=http_options)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Call Gemini; with ``stream=True`` yield partial text chunks, then one aggregate."""
        model = llm_request.model or self.model
        check_model_requests_allowed(model)
        models = (await self.api_client()).aio.models
        config = llm_request.config
        if config.labels:  # the Gemini API (an API key, not Vertex AI) takes no labels
            config = config.model_copy(update={"labels": None})
        if not stream:
            response = await models.generate_content(
                model=model, contents=llm_request.contents, config=config
            )
            yield LlmResponse.create(response)
            return
        chunks = await models.generate_content_stream(
            model=model, contents=llm_request.contents, config=config
        )
        async with aclosing(_aggregate_stream(chunks)) as responses:
            async for llm_response in responses:
                yield llm_response


async def _aggregate_stream(
    chunks: AsyncIterator[types.GenerateContentResponse],
) -> AsyncGenerator[LlmResponse, None]:
    """Yield a partial response per text chunk, then the aggregated final response."""
    aggregator = _StreamAggregator()
    try:
        async for chunk in chunks:
            response = LlmResponse.create(chunk)
            if response.error_code is not None:
                # A blocked prompt or an abnormal stop: that answer is the final response.
                yield response
                return
            partial = aggregator.add(response)
            if partial is not None:
                yield partial
    finally:
        # Release the HTTP stream even when the consumer stops early.
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
    yield aggregator.final()


class _StreamAggregator:
    """Accumulates streamed chunks into one final response (ADK 2.x streaming)."""

    def __init__(self) -> None:
        self.text = ""
        self.thought = ""
        self.text_signature: bytes | None = None
        self.thought_signature: bytes | None = None
        self.other_parts: list[types.Part] = []
        self.last: dict[str, Any] = {}

    def add(self, response: LlmResponse) -> LlmResponse | None:
        """Record one chunk; return the partial response to show for it, if it has text."""
        for name in (
            "finish_reason",
            "usage_metadata",
            "model_version",
            "grounding_metadata",
            "citation_metadata",
        ):
            value = getattr(response, name)
            if value is not None:
                self.last[name] = value
        parts = response.content.parts if response.content and response.content.parts else []
        text_parts: list[types.Part] = []
        for part in parts:
            if part.text is None:
                self.other_parts.append(part)
                continue
            if part.thought:
                self.thought += part.text
                self.thought_signature = part.thought_signature or self.thought_signature
            else:
                self.text += part.text
                self.text_signature = part.thought_signature or self.text_signature
            if part.text:
                text_parts.append(part)
        if not text_parts:
            return None
        return response.model_copy(
            update={
                "content": types.Content(role="model", parts=text_parts),
                "partial": True,
            }
        )

    def final(self) -> LlmResponse:
        """Return the non-partial response holding all text, then all other parts."""
        parts: list[types.Part] = []
        if self.thought:
            signature = self.thought_signature
            parts.append(types.Part(text=self.thought, thought=True, thought_signature=signature))
        if self.text:
            parts.append(types.Part(text=self.text, thought_signature=self.text_signature))
        parts.extend(self.other_parts)
        return LlmResponse(content=types.Content(role="model", parts=parts), **self.last)


LLMRegistry.register(Gemini)
