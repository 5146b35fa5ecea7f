"""The ready-made tools in tools/ used by an agent."""

from __future__ import annotations

from google.genai import types

from orchestrator import InMemoryRunner, LlmAgent
from orchestrator.models.fake import ScriptedLlm
from tests.support.events import call, user_text
from tools import load_artifact_text, load_memory


async def test_load_memory_finds_earlier_conversations_of_the_user():
    model = ScriptedLlm(responses=["noted", call("load_memory", query="favourite colour"), "blue"])
    runner = InMemoryRunner(LlmAgent(name="agent", model=model, tools=[load_memory]))
    first = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    [e async for e in runner.run_async(user_id="u", session_id=first.id,
                                       new_message=user_text("my favourite colour is blue"))]
    done = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=first.id)
    await runner.memory_service.add_session_to_memory(done)

    second = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    events = [e async for e in runner.run_async(user_id="u", session_id=second.id,
                                                new_message=user_text("what do I like?"))]
    memories = events[1].content.parts[0].function_response.response["memories"]
    assert any("favourite colour is blue" in m["text"] for m in memories)


async def test_load_artifact_text_reads_or_explains_what_exists():
    model = ScriptedLlm(responses=[call("load_artifact_text", filename="notes.txt"),
                                   call("load_artifact_text", filename="missing.txt"), "ok"])
    runner = InMemoryRunner(LlmAgent(name="agent", model=model, tools=[load_artifact_text]))
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    await runner.artifact_service.save_artifact(
        app_name=runner.app_name, user_id="u", session_id=session.id, filename="notes.txt",
        artifact=types.Part(text="remember the milk"))
    events = [e async for e in runner.run_async(user_id="u", session_id=session.id, new_message=user_text("x"))]
    found = events[1].content.parts[0].function_response.response
    missing = events[3].content.parts[0].function_response.response
    assert found == {"filename": "notes.txt", "text": "remember the milk"}
    assert "notes.txt" in missing["error"]
