"""Event / EventActions: final-response rules and ADK's wire JSON."""

from __future__ import annotations

from google.genai import types

from orchestrator import Event, EventActions


def fc_event(**kwargs) -> Event:
    return Event(
        author="a",
        content=types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(id="c1", name="t", args={}))]),
        **kwargs,
    )


def test_is_final_response_rules():
    text = Event(author="a", content=types.Content(role="model", parts=[types.Part(text="hi")]))
    assert text.is_final_response()
    assert not text.model_copy(update={"partial": True}).is_final_response()
    assert not fc_event().is_final_response()
    assert fc_event(long_running_tool_ids={"c1"}).is_final_response()
    assert not fc_event(long_running_tool_ids=set()).is_final_response()
    fr = Event(author="a", content=types.Content(role="user", parts=[types.Part(
        function_response=types.FunctionResponse(id="c1", name="t", response={}))]))
    assert not fr.is_final_response()
    assert fr.model_copy(update={"actions": EventActions(skip_summarization=True)}).is_final_response()
    assert Event(author="a", error_code="X").is_final_response()
    assert not Event(author="a", error_code="X", partial=True).is_final_response()
    assert Event(author="a").is_final_response()  # content-less state event
    code = Event(author="a", content=types.Content(role="model", parts=[types.Part(
        code_execution_result=types.CodeExecutionResult(outcome="OUTCOME_OK", output="1"))]))
    assert not code.is_final_response()


def test_wire_json_is_camel_case_without_nones_and_round_trips():
    event = fc_event(
        long_running_tool_ids={"c2", "c1"}, invocation_id="e-1", branch="a.b",
        actions=EventActions(state_delta={"k": 1}),
    )
    wire = event.to_wire()
    assert wire["invocationId"] == "e-1"
    assert wire["longRunningToolIds"] == ["c1", "c2"]
    assert wire["actions"] == {
        "stateDelta": {"k": 1}, "artifactDelta": {}, "requestedAuthConfigs": {},
        "requestedToolConfirmations": {},
    }
    assert wire["content"]["parts"][0]["functionCall"] == {"id": "c1", "args": {}, "name": "t"}
    assert "partial" not in wire and "errorCode" not in wire
    assert Event.from_wire(wire) == event
    assert Event.from_wire(event.to_json()) == event


def test_snake_case_accepted_unknown_keys_ignored_bytes_base64():
    event = Event.model_validate({
        "invocation_id": "e-2", "author": "x", "unknown_field": 1,
        "content": {"role": "user", "parts": [{"inline_data": {"mime_type": "image/png", "data": b"\x89PNG"}}]},
    })
    assert event.invocation_id == "e-2"
    wire = event.to_wire()
    assert wire["content"]["parts"][0]["inlineData"] == {"mimeType": "image/png", "data": "iVBORw=="}
    assert Event.from_wire(event.to_json()).content.parts[0].inline_data.data == b"\x89PNG"


def test_ids_and_helpers():
    a, b = Event(author="x"), Event(author="x")
    assert a.id != b.id and len(a.id) == 36
    assert fc_event().get_function_calls()[0].name == "t"
    assert Event(author="x").get_function_calls() == []
