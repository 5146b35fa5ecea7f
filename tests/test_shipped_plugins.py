"""The plugins adk-celery ships (orchestrator.plugins), in process.

What they send the model is compared with google-adk's own plugins in the golden scenarios
(p13, p14); here: their options and edge cases.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from google.genai import types

from orchestrator import App, InMemoryRunner, LlmAgent
from orchestrator.models.fake import ScriptedLlm
from orchestrator.plugins import (
    ContextFilterPlugin,
    GlobalInstructionPlugin,
    LoggingPlugin,
    ReflectAndRetryToolPlugin,
    SaveFilesAsArtifactsPlugin,
    TrackingScope,
)
from orchestrator.plugins.reflect_retry_tool_plugin import REFLECT_AND_RETRY_RESPONSE_TYPE
from tests.support.events import call, simplify_all, user_text


async def _turns(runner: InMemoryRunner, *messages: Any, state: dict | None = None) -> list[list[Any]]:
    session = await runner.session_service.create_session(
        app_name=runner.app_name, user_id="u", state=state)
    out = []
    for message in messages:
        content = user_text(message) if isinstance(message, str) else message
        out.append([e async for e in runner.run_async(
            user_id="u", session_id=session.id, new_message=content)])
    return out


def _runner(agent: LlmAgent, *plugins: Any) -> InMemoryRunner:
    return InMemoryRunner(app=App(name="app", root_agent=agent, plugins=list(plugins)))


def _responses(events: list[Any]) -> list[dict]:
    return [r.response for e in events for r in e.get_function_responses()]


# -- ReflectAndRetryToolPlugin --------------------------------------------------------------

attempts: list[int] = []


def flaky(n: int) -> dict[str, Any]:
    """Fails for n below 3."""
    attempts.append(n)
    if n < 3:
        raise ValueError(f"n too small: {n}")
    return {"n": n}


async def test_reflect_and_retry_guides_the_model_then_gives_up_by_raising():
    attempts.clear()
    model = ScriptedLlm(responses=[call("flaky", n=0), call("flaky", n=1), call("flaky", n=2)])
    runner = _runner(LlmAgent(name="a", model=model, tools=[flaky]),
                     ReflectAndRetryToolPlugin(max_retries=2))
    with pytest.raises(RuntimeError, match="reflect_retry_tool_plugin") as info:
        await _turns(runner, "go")
    assert isinstance(info.value.__cause__, ValueError)  # the tool's own error, raised again
    session = (await runner.session_service.list_sessions(app_name="app", user_id="u")).sessions[0]
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id=session.id)
    answers = _responses(session.events)
    assert [a["retry_count"] for a in answers] == [1, 2]
    assert all(a["response_type"] == REFLECT_AND_RETRY_RESPONSE_TYPE for a in answers)
    assert answers[0]["error_details"] == "n too small: 0"
    assert "flaky" in answers[0]["reflection_guidance"] and "1 of 2" in answers[0]["reflection_guidance"]
    assert attempts == [0, 1, 2]


async def test_reflect_and_retry_without_raising_tells_the_model_to_stop_and_success_resets():
    model = ScriptedLlm(responses=[
        call("flaky", n=0), call("flaky", n=5), call("flaky", n=1), call("flaky", n=2), "gave up",
    ])
    runner = _runner(LlmAgent(name="a", model=model, tools=[flaky]),
                     ReflectAndRetryToolPlugin(max_retries=1, throw_exception_if_retry_exceeded=False))
    (events,) = await _turns(runner, "go")
    answers = _responses(events)
    # Failure 1 of 1; a success resets the count; failure 1 again; then over the limit.
    assert [a.get("retry_count") for a in answers] == [1, None, 1, 1]
    assert answers[1] == {"n": 5}
    assert "Do not call `flaky` again" in answers[3]["reflection_guidance"]
    assert simplify_all(events)[-1] == ("a", "gave up")


async def test_reflect_and_retry_counts_per_invocation_unless_global():
    for scope, expected in ((TrackingScope.INVOCATION, [1, 1]), (TrackingScope.GLOBAL, [1, 2])):
        model = ScriptedLlm(responses=[call("flaky", n=0), "a", call("flaky", n=0), "b"])
        runner = _runner(LlmAgent(name="a", model=model, tools=[flaky]),
                         ReflectAndRetryToolPlugin(max_retries=5, tracking_scope=scope))
        first, second = await _turns(runner, "one", "two")
        counts = [a["retry_count"] for a in _responses(first) + _responses(second)]
        assert counts == expected, scope


async def test_reflect_and_retry_can_count_errors_reported_in_results():
    class StatusAware(ReflectAndRetryToolPlugin):
        async def extract_error_from_result(self, *, result: Any, **kwargs: Any) -> Any:
            return result if isinstance(result, dict) and result.get("status") == "error" else None

    def soft_fail() -> dict[str, str]:
        """Reports an error without raising."""
        return {"status": "error", "why": "backend busy"}

    model = ScriptedLlm(responses=[call("soft_fail"), "ok"])
    runner = _runner(LlmAgent(name="a", model=model, tools=[soft_fail]), StatusAware())
    (events,) = await _turns(runner, "go")
    (answer,) = _responses(events)
    assert answer["response_type"] == REFLECT_AND_RETRY_RESPONSE_TYPE
    assert answer["error_type"] == "ToolError" and "backend busy" in answer["error_details"]


def test_reflect_and_retry_refuses_a_negative_retry_count():
    with pytest.raises(ValueError, match="max_retries must be a non-negative integer, got -1"):
        ReflectAndRetryToolPlugin(max_retries=-1)


# -- LoggingPlugin --------------------------------------------------------------------------


def broken(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"broken with {x}")


async def test_logging_plugin_prints_each_step_and_a_recovered_error_once(capsys):
    model = ScriptedLlm(responses=[call("broken", x=1), "done"])
    runner = _runner(LlmAgent(name="a", model=model, tools=[broken]),
                     LoggingPlugin(), ReflectAndRetryToolPlugin())
    await _turns(runner, "hello there")
    out = capsys.readouterr().out
    lines = [line.removeprefix("\x1b[90m").removesuffix("\x1b[0m") for line in out.splitlines()]
    assert all(line.startswith("[logging_plugin] ") for line in lines)
    titles = [line.removeprefix("[logging_plugin] ") for line in lines if "   " not in line]
    assert titles == [
        "USER MESSAGE RECEIVED", "INVOCATION STARTING", "AGENT STARTING", "LLM REQUEST",
        "LLM RESPONSE", "EVENT YIELDED", "TOOL STARTING", "TOOL ERROR", "EVENT YIELDED",
        "LLM REQUEST", "LLM RESPONSE", "EVENT YIELDED", "AGENT COMPLETED", "INVOCATION COMPLETED",
    ]
    assert "[logging_plugin]    User Content: text: 'hello there'" in lines
    assert "[logging_plugin]    Error: broken with 1" in lines
    assert "[logging_plugin]    Available Tools: ['broken']" in lines


# -- GlobalInstructionPlugin, ContextFilterPlugin -------------------------------------------


async def test_global_instruction_from_an_async_provider_leads_every_agents_instruction():
    async def provider(context: Any) -> str:
        return f"Speak to {context.state['who']}."

    model = ScriptedLlm(responses=["hi"])
    runner = _runner(LlmAgent(name="a", model=model, instruction="Be kind."),
                     GlobalInstructionPlugin(provider))
    await _turns(runner, "x", state={"who": "Ada"})
    instruction = model.requests[0].config.system_instruction
    assert instruction.startswith("Speak to Ada.\n\nBe kind.\n\n")


async def test_context_filter_keeps_calls_with_their_answers_and_applies_a_custom_filter():
    def lookup(q: str) -> str:
        """Look up."""
        return q

    seen: list[int] = []

    def count(contents: list[types.Content]) -> list[types.Content]:
        seen.append(len(contents))
        return contents

    model = ScriptedLlm(responses=["one", call("lookup", q="b"), "two"])
    runner = _runner(LlmAgent(name="a", model=model, tools=[lookup]),
                     ContextFilterPlugin(num_invocations_to_keep=1, custom_filter=count))
    await _turns(runner, "first", "second")
    last = model.requests[-1].contents
    # The first turn is gone; the second keeps its call and its answer together.
    assert [c.role for c in last] == ["user", "model", "user"]
    assert last[0].parts[0].text == "second" and last[2].parts[0].function_response is not None
    # What the custom filter got: already trimmed to the last turn each time.
    assert seen == [1, 1, 3]


async def test_a_global_instruction_provider_answering_none_adds_nothing():
    model = ScriptedLlm(responses=["hi"])
    runner = _runner(LlmAgent(name="a", model=model, instruction="Be kind."),
                     GlobalInstructionPlugin(lambda context: None))
    await _turns(runner, "x")
    instruction = model.requests[0].config.system_instruction
    assert instruction.startswith("Be kind.") and "None" not in instruction


async def test_a_custom_filter_returning_no_list_leaves_the_request_as_it_was(caplog):
    model = ScriptedLlm(responses=["one", "two"])
    runner = _runner(LlmAgent(name="a", model=model),
                     ContextFilterPlugin(custom_filter=lambda contents: None))
    with caplog.at_level("ERROR", logger="orchestrator.plugins.context_filter_plugin"):
        await _turns(runner, "first", "second")
    assert [c.parts[0].text for c in model.requests[-1].contents] == ["first", "one", "second"]
    assert "custom_filter returned NoneType, not a list of contents" in caplog.text


def test_context_filter_refuses_a_remove_amount_below_one():
    with pytest.raises(ValueError, match="remove_amount must be at least 1, got 0"):
        ContextFilterPlugin(remove_amount=0)


# -- SaveFilesAsArtifactsPlugin -------------------------------------------------------------


def _upload(data: bytes, name: str | None = "big.bin") -> types.Content:
    return types.Content(role="user", parts=[types.Part(inline_data=types.Blob(
        mime_type="application/octet-stream", data=data, display_name=name))])


async def test_save_files_replaces_a_file_too_large_with_a_note_and_names_unnamed_files():
    model = ScriptedLlm(responses=["a", "b"])
    runner = _runner(LlmAgent(name="a", model=model), SaveFilesAsArtifactsPlugin())
    await _turns(runner, _upload(b"x" * (20 * 1024 * 1024 + 1)), _upload(b"small", name=None))
    first = model.requests[0].contents[-1].parts[0].text
    assert first.startswith("[Upload Error: File big.bin (20.00 MB) exceeds the maximum")
    second = model.requests[1].contents[-1].parts[0].text
    assert second.startswith('[Uploaded Artifact: "artifact_e-') and second.endswith('_0"]')
    session = (await runner.session_service.list_sessions(app_name="app", user_id="u")).sessions[0]
    keys = await runner.artifact_service.list_artifact_keys(
        app_name="app", user_id="u", session_id=session.id)
    assert len(keys) == 1 and keys[0].startswith("artifact_e-")


async def test_save_files_without_an_artifact_service_leaves_the_message_as_it_is(caplog):
    from orchestrator import Runner
    from orchestrator.sessions.in_memory_session_service import InMemorySessionService

    model = ScriptedLlm(responses=["a"])
    runner = Runner(app=App(name="app", root_agent=LlmAgent(name="a", model=model),
                            plugins=[SaveFilesAsArtifactsPlugin()]),
                    session_service=InMemorySessionService())
    with caplog.at_level(logging.WARNING):
        await _turns(runner, _upload(b"data"))
    assert model.requests[0].contents[-1].parts[0].inline_data.data == b"data"
    assert "no artifact service" in caplog.text
