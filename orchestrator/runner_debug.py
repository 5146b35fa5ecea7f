"""``Runner.run_debug``: send a few messages and see the answers, for trying an agent out.

As google-adk's: each message runs in turn on one session (made if missing, kept between
calls), each event is printed as it comes unless ``quiet`` (text as ``author > text``; with
``verbose`` also tool calls and their results, cut to a readable length), and every event
is returned. For experiments: applications use ``run_async``.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.agents.run_config import RunConfig
from orchestrator.events.event import Event

if TYPE_CHECKING:
    from orchestrator.runners import Runner

logger = logging.getLogger(__name__)

_ARGS_SHOWN = 300
_RESULT_SHOWN = 300


async def run_debug(
    runner: Runner, user_messages: str | list[str], *, user_id: str, session_id: str,
    run_config: RunConfig | None, quiet: bool, verbose: bool,
) -> list[Event]:
    """Run ``user_messages`` one after the other; print and return their events."""
    run_config = run_config or RunConfig()
    session = await runner.session_service.get_session(
        app_name=runner.app_name, user_id=user_id, session_id=session_id,
        config=run_config.get_session_config)
    if session is None:
        session = await runner.session_service.create_session(
            app_name=runner.app_name, user_id=user_id, session_id=session_id)
        if not quiet:
            logger.info("Created new session: %s", session_id)
    elif not quiet:
        logger.info("Continue session: %s", session_id)
    events: list[Event] = []
    for text in [user_messages] if isinstance(user_messages, str) else user_messages:
        if not quiet:
            logger.info("User > %s", text)
        message = types.Content(role="user", parts=[types.Part(text=text)])
        run = runner.run_async(user_id=user_id, session_id=session.id, new_message=message,
                               run_config=run_config)
        async with contextlib.aclosing(run) as stream:
            async for event in stream:
                if not quiet:
                    print_event(event, verbose=verbose)
                events.append(event)
    return events


def print_event(event: Event, *, verbose: bool = False) -> None:
    """Print what an event says: its text, and with ``verbose`` its tool calls and results."""
    if not event.content or not event.content.parts:
        return
    text: list[str] = []
    for part in event.content.parts:
        if part.thought and not verbose:
            continue
        if part.text:
            text.append(part.text)
            continue
        if text:
            print(f"{event.author} > {''.join(text)}")
            text.clear()
        if not verbose:
            continue
        if part.function_call:
            print(f"{event.author} > [Calling tool: {part.function_call.name}("
                  f"{_cut(str(part.function_call.args), _ARGS_SHOWN)})]")
        elif part.function_response:
            print(f"{event.author} > [Tool result: "
                  f"{_cut(str(part.function_response.response), _RESULT_SHOWN)}]")
    if text:
        print(f"{event.author} > {''.join(text)}")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
