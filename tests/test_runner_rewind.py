"""``Runner.rewind_async`` and ``Runner.run_debug``, as google-adk 2.13 behaves.

The expected values below are what google-adk's own ``InMemoryRunner`` gives for the same
agent (checked side by side when this was written).
"""

from __future__ import annotations

from typing import Any

import pytest
from google.genai import types

from orchestrator import InMemoryRunner, LlmAgent, ToolContext
from orchestrator.errors import InvocationNotFoundError
from orchestrator.models.fake import FunctionLlm


async def note(text: str, tool_context: ToolContext) -> dict[str, Any]:
    """Count the notes in state and keep the latest as an artifact."""
    n = tool_context.state.get("count", 0) + 1
    tool_context.state["count"] = n
    tool_context.state[f"k{n}"] = text
    tool_context.state["user:seen"] = n
    await tool_context.save_artifact("notes.txt", types.Part(text=f"v{n}:{text}"))
    if n == 2:
        await tool_context.save_artifact("new.txt", types.Part(text="new"))
    return {"n": n}


def _runner(seen: list[list[str]]) -> InMemoryRunner:
    def model(request: Any) -> Any:
        seen.append([p.text for c in request.contents for p in c.parts or [] if p.text])
        if any(p.function_response for p in request.contents[-1].parts or []):
            return "ok"
        return types.Part(function_call=types.FunctionCall(
            name="note", args={"text": request.contents[-1].parts[0].text}))

    return InMemoryRunner(LlmAgent(name="root", model=FunctionLlm(fn=model), tools=[note]),
                          app_name="rw")


async def _say(runner: InMemoryRunner, session_id: str, text: str) -> str:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    events = [e async for e in runner.run_async(user_id="u", session_id=session_id,
                                                new_message=message)]
    return events[-1].invocation_id


async def test_rewind_puts_the_sessions_state_artifacts_and_history_back() -> None:
    seen: list[list[str]] = []
    runner = _runner(seen)
    session = await runner.session_service.create_session(app_name="rw", user_id="u")
    await _say(runner, session.id, "one")
    second = await _say(runner, session.id, "two")

    await runner.rewind_async(user_id="u", session_id=session.id,
                              rewind_before_invocation_id=second)

    stored = await runner.session_service.get_session(app_name="rw", user_id="u",
                                                      session_id=session.id)
    rewind = stored.events[-1]
    assert rewind.author == "user" and rewind.actions.rewind_before_invocation_id == second
    assert rewind.actions.state_delta == {"count": 1, "k2": None}
    assert rewind.actions.artifact_delta == {"notes.txt": 2, "new.txt": 1}
    # The session's own keys are back; user: state is not the session's to rewind.
    assert stored.state == {"count": 1, "k1": "one", "k2": None, "user:seen": 2}

    async def load(filename: str) -> types.Part | None:
        return await runner.artifact_service.load_artifact(
            app_name="rw", user_id="u", session_id=session.id, filename=filename)

    assert (await load("notes.txt")).text == "v1:one"
    assert await load("new.txt") is None  # saved after the point: a tombstone, read as absent
    # The model no longer sees the rewound invocation.
    await _say(runner, session.id, "three")
    assert seen[-2] == ["one", "ok", "three"]


async def test_rewind_to_an_unknown_invocation_is_refused() -> None:
    runner = _runner([])
    session = await runner.session_service.create_session(app_name="rw", user_id="u")
    await _say(runner, session.id, "one")
    with pytest.raises(InvocationNotFoundError, match="e-nope"):
        await runner.rewind_async(user_id="u", session_id=session.id,
                                  rewind_before_invocation_id="e-nope")
    stored = await runner.session_service.get_session(app_name="rw", user_id="u",
                                                      session_id=session.id)
    assert not any(e.actions.rewind_before_invocation_id for e in stored.events)


async def test_run_debug_prints_the_answers_and_returns_every_event(capsys) -> None:
    runner = _runner([])
    events = await runner.run_debug(["one", "two"])
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["root > ok", "root > ok"]
    assert [e.author for e in events] == ["root"] * 6  # call, answer, text per message
    # The session is kept: the next call goes on with it.
    more = await runner.run_debug("three", quiet=True, verbose=True)
    assert capsys.readouterr().out == "" and len(more) == 3
    await runner.run_debug("four", verbose=True)
    assert capsys.readouterr().out.splitlines() == [
        "root > [Calling tool: note({'text': 'four'})]", "root > [Tool result: {'n': 4}]",
        "root > ok"]
