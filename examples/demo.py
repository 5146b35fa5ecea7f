"""Embedded demo: run the trip planner in this process and print its event stream.

    python -m examples.demo
"""

from __future__ import annotations

import asyncio

from google.genai import types

from config import get_settings
from examples.trip_planner import app
from orchestrator import Event, InMemoryRunner
from orchestrator.process_setup import configure_core


def describe(event: Event) -> str:
    """One readable line per event."""
    who = f"[{event.author}]".ljust(16)
    if event.error_code:
        return f"{who}error {event.error_code}: {event.error_message}"
    lines = []
    for part in (event.content.parts if event.content else None) or []:
        if part.text:
            lines.append(part.text)
        elif part.function_call:
            args = ", ".join(f"{k}={v!r}" for k, v in (part.function_call.args or {}).items())
            line = f"-> {part.function_call.name}({args})"
            if event.long_running_tool_ids and part.function_call.id in event.long_running_tool_ids:
                line += "   [long-running: invocation paused]"
            lines.append(line)
        elif part.function_response:
            lines.append(f"<- {part.function_response.name}: {part.function_response.response}")
    if event.actions.state_delta:
        lines.append(f"   state += {event.actions.state_delta}")
    return who + ("\n" + " " * 16).join(lines or ["(no content)"])


async def main() -> None:
    """Run one invocation to its pause, answer the pending call, and run it to the end."""
    # The demo is a process of its own: its Gemini key and endpoint come from the settings
    # (ADK_CELERY_GOOGLE_API_KEY, ADK_CELERY_GEMINI_BASE_URL), as the trip planner's choice
    # of model does, not from GOOGLE_API_KEY alone as in a bare script with a Runner.
    configure_core(get_settings())
    runner = InMemoryRunner(app=app)
    session = await runner.session_service.create_session(app_name=app.name, user_id="demo")
    message = "Plan 3 nights in Lisbon"
    print(f"{'[user]'.ljust(16)}{message}")
    pending: list[types.FunctionCall] = []
    async for event in runner.run_async(
        user_id="demo", session_id=session.id,
        new_message=types.Content(role="user", parts=[types.Part(text=message)]),
    ):
        print(describe(event))
        pending += [c for c in event.get_function_calls() if c.id in (event.long_running_tool_ids or ())]
    for call in pending:
        answer = {"approved": True, "ticket": "T-1042"}
        print(f"\n{'[manager]'.ljust(16)}answers {call.name} ({call.id}): {answer}")
        async for event in runner.run_async(
            user_id="demo", session_id=session.id,
            new_message=types.Content(role="user", parts=[types.Part(
                function_response=types.FunctionResponse(id=call.id, name=call.name, response=answer)
            )]),
        ):
            print(describe(event))
    final = await runner.session_service.get_session(
        app_name=app.name, user_id="demo", session_id=session.id
    )
    assert final is not None
    print(f"\nsession state: {final.state}")
    print(f"events stored: {len(final.events)}, all in invocation {final.events[-1].invocation_id}")


if __name__ == "__main__":
    asyncio.run(main())
