"""Gemini on the real google-genai client, against a local Gemini REST stub."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator

import pytest
from google.genai import errors, types
from pydantic import SecretStr

from config.settings import Settings
from orchestrator.errors import GeminiConfigurationError, ModelRequestsBlockedError
from orchestrator.models import gemini as gemini_module
from orchestrator.models import guard
from orchestrator.models.gemini import Gemini
from orchestrator.models.guard import set_model_requests_allowed
from orchestrator.models.llm_request import LlmRequest
from orchestrator.models.llm_response import LlmResponse
from orchestrator.models.registry import LLMRegistry
from orchestrator.process_setup import CoreDefaults
from tests.support.gemini_stub import (
    GeminiStub,
    StubError,
    function_call_part,
    response,
    text_chunk,
    text_response,
    usage,
)

API_KEY = "test-key"


@pytest.fixture(autouse=True)
def allow_model_requests() -> Iterator[None]:
    """The suite blocks real models; these tests talk to a local stub, so allow them here."""
    previous = guard._allowed
    set_model_requests_allowed(True)
    yield
    set_model_requests_allowed(previous)


@pytest.fixture
def stub() -> Iterator[GeminiStub]:
    with GeminiStub() as server:
        yield server


def make_gemini(stub: GeminiStub, **kwargs: object) -> Gemini:
    return Gemini(
        api_key=SecretStr(API_KEY),
        base_url=stub.base_url,
        retry_options=types.HttpRetryOptions(attempts=1),
        **kwargs,  # type: ignore[arg-type]
    )


def user_request(text: str = "hi", **kwargs: object) -> LlmRequest:
    contents = [types.Content(role="user", parts=[types.Part(text=text)])]
    return LlmRequest(contents=contents, **kwargs)  # type: ignore[arg-type]


async def collect(llm: Gemini, request: LlmRequest, stream: bool = False) -> list[LlmResponse]:
    return [r async for r in llm.generate_content_async(request, stream=stream)]


async def test_text_response(stub: GeminiStub) -> None:
    stub.enqueue(text_response("Hello there."))

    [answer] = await collect(make_gemini(stub), user_request())

    assert answer.content is not None and answer.content.role == "model"
    assert [p.text for p in answer.content.parts or []] == ["Hello there."]
    assert answer.finish_reason == types.FinishReason.STOP
    assert answer.usage_metadata is not None and answer.usage_metadata.total_token_count == 8
    assert answer.model_version == "gemini-2.5-flash-stub"
    assert not answer.partial and answer.error_code is None
    [sent] = stub.requests
    assert sent.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert sent.model == "gemini-2.5-flash" and not sent.stream
    assert sent.headers["x-goog-api-key"] == API_KEY
    assert sent.body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


async def test_function_calls_are_parsed(stub: GeminiStub) -> None:
    stub.enqueue(
        response(
            [
                {"text": "Let me check."},
                function_call_part("get_weather", {"city": "Paris"}, call_id="call-1"),
                function_call_part("get_time", {"tz": "CET", "precise": True}),
            ],
            usage_metadata=usage(),
        )
    )

    [answer] = await collect(make_gemini(stub), user_request("weather?"))

    calls = answer.get_function_calls()
    assert [(c.name, c.args, c.id) for c in calls] == [
        ("get_weather", {"city": "Paris"}, "call-1"),
        ("get_time", {"tz": "CET", "precise": True}, None),
    ]
    assert answer.content is not None and answer.content.parts is not None
    assert answer.content.parts[0].text == "Let me check."


async def test_request_reaches_the_wire(stub: GeminiStub) -> None:
    stub.enqueue(text_response("ok"))
    declaration = types.FunctionDeclaration(
        name="get_weather",
        description="Weather for a city.",
        parameters=types.Schema(
            type=types.Type.OBJECT,
            properties={"city": types.Schema(type=types.Type.STRING)},
            required=["city"],
        ),
    )
    request = LlmRequest(
        model="gemini-2.5-pro",
        contents=[
            types.Content(role="user", parts=[types.Part(text="weather in Paris?")]),
            types.Content(
                role="model",
                parts=[
                    types.Part(
                        function_call=types.FunctionCall(
                            id="c1", name="get_weather", args={"city": "Paris"}
                        )
                    )
                ],
            ),
            types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            id="c1", name="get_weather", response={"temp": 21}
                        )
                    )
                ],
            ),
        ],
        config=types.GenerateContentConfig(
            system_instruction="You are a weather bot.",
            temperature=0.2,
            max_output_tokens=64,
            tools=[types.Tool(function_declarations=[declaration])],
        ),
    )

    await collect(make_gemini(stub), request)

    [sent] = stub.requests
    assert sent.path == "/v1beta/models/gemini-2.5-pro:generateContent"  # request model wins
    body = sent.body
    assert body["systemInstruction"]["parts"] == [{"text": "You are a weather bot."}]
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "weather in Paris?"}]},
        {
            "role": "model",
            "parts": [
                {"functionCall": {"id": "c1", "name": "get_weather", "args": {"city": "Paris"}}}
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": "c1",
                        "name": "get_weather",
                        "response": {"temp": 21},
                    }
                }
            ],
        },
    ]
    [tool] = body["tools"]
    [sent_declaration] = tool["functionDeclarations"]
    assert sent_declaration["name"] == "get_weather"
    assert sent_declaration["description"] == "Weather for a city."
    assert sent_declaration["parameters"]["properties"]["city"]["type"] == "STRING"
    assert sent_declaration["parameters"]["required"] == ["city"]
    assert body["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 64}


@pytest.mark.parametrize("stream", [False, True])
async def test_labels_are_not_sent_to_the_gemini_api(stub: GeminiStub, stream: bool) -> None:
    """Every request carries ``adk_agent_name``; the Gemini API (an API key) takes no labels."""
    stub.enqueue(text_chunk("ok") if stream else text_response("ok"))
    request = user_request(config=types.GenerateContentConfig(
        temperature=0.5, labels={"adk_agent_name": "root"}))

    await collect(make_gemini(stub), request, stream=stream)

    [sent] = stub.requests
    assert "labels" not in sent.body
    assert sent.body["generationConfig"] == {"temperature": 0.5}
    assert request.config.labels == {"adk_agent_name": "root"}  # the caller's request is kept


async def test_streaming_yields_partials_then_aggregate(stub: GeminiStub) -> None:
    signature = base64.b64encode(b"sig").decode()
    final_usage = usage(prompt=4, candidates=9)
    stub.enqueue(
        [
            text_chunk("Thinking about ", thought=True),
            text_chunk("the weather.", thought=True),
            text_chunk("It is "),
            text_chunk("sunny "),
            response(
                [
                    {"text": "in Paris."},
                    function_call_part("log_answer", {"ok": True}),
                    {"text": "", "thoughtSignature": signature},
                ],
                finish_reason="STOP",
                usage_metadata=final_usage,
            ),
        ]
    )

    responses = await collect(make_gemini(stub), user_request(), stream=True)

    *partials, final = responses
    assert all(r.partial for r in partials)
    assert [[p.text for p in r.content.parts or []] for r in partials if r.content] == [
        ["Thinking about "],
        ["the weather."],
        ["It is "],
        ["sunny "],
        ["in Paris."],
    ]
    assert not final.partial and final.error_code is None
    assert final.content is not None and final.content.role == "model"
    parts = final.content.parts or []
    assert len(parts) == 3
    assert parts[0].thought and parts[0].text == "Thinking about the weather."
    assert not parts[1].thought and parts[1].text == "It is sunny in Paris."
    assert parts[1].thought_signature == b"sig"
    assert parts[2].function_call is not None and parts[2].function_call.name == "log_answer"
    assert [c.args for c in final.get_function_calls()] == [{"ok": True}]
    assert final.finish_reason == types.FinishReason.STOP
    assert final.usage_metadata is not None and final.usage_metadata.total_token_count == 13
    [sent] = stub.requests
    assert sent.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert sent.query == {"alt": ["sse"]} and sent.stream
    assert sent.headers["x-goog-api-key"] == API_KEY


async def test_streaming_function_call_only(stub: GeminiStub) -> None:
    stub.enqueue([response([function_call_part("ping", {})], usage_metadata=usage())])

    responses = await collect(make_gemini(stub), user_request(), stream=True)

    [final] = responses  # no text, so no partials
    assert not final.partial
    assert [c.name for c in final.get_function_calls()] == ["ping"]


async def test_streaming_error_chunk_is_the_final_response(stub: GeminiStub) -> None:
    stub.enqueue(
        [
            text_chunk("Sure, here"),
            {
                "candidates": [
                    {"finishReason": "SAFETY", "finishMessage": "Stopped for safety.", "index": 0}
                ],
                "usageMetadata": usage(),
            },
        ]
    )

    responses = await collect(make_gemini(stub), user_request(), stream=True)

    partial, final = responses
    assert partial.partial
    assert not final.partial
    assert final.error_code == "SAFETY"
    # (google-genai drops ``finishMessage`` for the Gemini Developer API: it is a Vertex field.)
    assert final.finish_reason == types.FinishReason.SAFETY
    assert final.content is None


@pytest.mark.parametrize("stream", [False, True])
async def test_blocked_prompt_becomes_error_code(stub: GeminiStub, stream: bool) -> None:
    blocked = {
        "promptFeedback": {"blockReason": "PROHIBITED_CONTENT", "blockReasonMessage": "No."},
        "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7},
    }
    stub.enqueue([blocked] if stream else blocked)

    [answer] = await collect(make_gemini(stub), user_request("something bad"), stream=stream)

    assert answer.error_code == "PROHIBITED_CONTENT"
    assert answer.error_message == "No."
    assert answer.content is None and not answer.partial


@pytest.mark.parametrize(
    ("code", "error_type"), [(400, errors.ClientError), (500, errors.ServerError)]
)
@pytest.mark.parametrize("stream", [False, True])
async def test_http_error_surfaces_with_server_message(
    stub: GeminiStub, code: int, error_type: type[errors.APIError], stream: bool
) -> None:
    message = f"Stub says no ({code})."
    stub.enqueue(StubError(code, message))

    with pytest.raises(error_type) as raised:
        await collect(make_gemini(stub), user_request(), stream=stream)

    assert raised.value.code == code
    assert raised.value.message == message
    assert message in str(raised.value)
    assert len(stub.requests) == 1  # attempts=1: no retry


async def test_blocked_model_requests_make_no_network_call(stub: GeminiStub) -> None:
    stub.enqueue(text_response("never sent"))
    llm = make_gemini(stub)
    set_model_requests_allowed(False)
    try:
        for stream in (False, True):
            with pytest.raises(ModelRequestsBlockedError):
                await collect(llm, user_request(), stream=stream)
    finally:
        set_model_requests_allowed(True)
    assert stub.requests == []
    assert stub.pending == 1


async def test_missing_api_key_is_a_clear_error(
    stub: GeminiStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    settings = Settings.model_construct(google_api_key=None, gemini_base_url=stub.base_url)
    monkeypatch.setattr(gemini_module, "core_defaults", lambda: CoreDefaults.from_settings(settings))

    with pytest.raises(GeminiConfigurationError, match="GOOGLE_API_KEY"):
        await collect(Gemini(), user_request())

    assert stub.requests == []


async def test_defaults_come_from_settings(
    stub: GeminiStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings.model_construct(
        google_api_key=SecretStr("settings-key"), gemini_base_url=stub.base_url
    )
    monkeypatch.setattr(gemini_module, "core_defaults", lambda: CoreDefaults.from_settings(settings))
    stub.enqueue(text_response("from settings"))

    [answer] = await collect(Gemini(), user_request())

    assert answer.content is not None and answer.content.parts
    assert answer.content.parts[0].text == "from settings"
    assert stub.requests[0].headers["x-goog-api-key"] == "settings-key"


async def test_client_is_built_once_per_instance(stub: GeminiStub) -> None:
    stub.enqueue(text_response("one"), text_response("two"))
    llm = make_gemini(stub)

    first = await llm.api_client()
    await collect(llm, user_request())
    await collect(llm, user_request())

    assert await llm.api_client() is first
    assert len(stub.requests) == 2


def test_instance_works_across_event_loops(stub: GeminiStub) -> None:
    """The sync Runner.run drives each call on its own asyncio.run loop."""
    stub.enqueue(text_response("one"), text_response("two"))
    llm = make_gemini(stub)

    first = asyncio.run(collect(llm, user_request()))
    second = asyncio.run(collect(llm, user_request()))

    texts = [r.content.parts[0].text for r in first + second if r.content and r.content.parts]
    assert texts == ["one", "two"]
    copied = llm.model_copy(deep=True)  # a used instance can still be deep-copied
    assert copied.model == llm.model


def test_registry_resolves_gemini_names() -> None:
    for name in (
        "gemini-2.5-flash",
        "gemini-2.0-pro-exp",
        "model-optimizer-exp-04-09",
        "projects/p/locations/us-central1/endpoints/123",
        "projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro",
    ):
        assert LLMRegistry.resolve(name) is Gemini
    llm = LLMRegistry.new_llm("gemini-2.5-pro")
    assert isinstance(llm, Gemini) and llm.model == "gemini-2.5-pro"


async def test_stub_rejects_a_wrong_api_key() -> None:
    with GeminiStub(expected_api_key="right-key") as server:
        server.enqueue(text_response("unused"))
        with pytest.raises(errors.ClientError, match="API key not valid"):
            await collect(make_gemini(server), user_request())
        assert server.pending == 1
