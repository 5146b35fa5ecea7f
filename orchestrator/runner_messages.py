"""What a run commits for the user: the user's event, and the run's metadata on every event."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from google.genai import types

from orchestrator import failpoints
from orchestrator.agents.invocation_context import InvocationContext
from orchestrator.agents.run_config import RunConfig
from orchestrator.events.event import Event
from orchestrator.events.event_actions import EventActions
from orchestrator.runner_plugins import replace_user_message
from orchestrator.sessions.base_session_service import SessionWriter


async def commit_user_message(
    ctx: InvocationContext,
    message: types.Content | None,
    state_delta: dict[str, Any] | None,
    run_config: RunConfig,
    call_event: Event | None,
    writer: SessionWriter,
    yield_user_message: bool,
) -> AsyncGenerator[Event, None]:
    """Commit the run's user event (the plugins may replace the message first)."""
    if message is not None:
        replaced = await replace_user_message(ctx, message)
        if replaced is not None:
            validate_new_message(replaced)
            if ctx.user_content is message:
                ctx.user_content = replaced
            message = replaced
    if message is None and not state_delta:
        return
    event = await _append_user_event(ctx, message, state_delta, run_config, call_event, writer)
    if yield_user_message:
        yield event


async def _append_user_event(
    ctx: InvocationContext,
    new_message: types.Content | None,
    state_delta: dict[str, Any] | None,
    run_config: RunConfig,
    call_event: Event | None,
    writer: SessionWriter,
) -> Event:
    event = Event(
        invocation_id=ctx.invocation_id,
        author="user",
        content=new_message,
        actions=EventActions(state_delta=dict(state_delta)) if state_delta else EventActions(),
        branch=call_event.branch if call_event is not None else None,
    )
    apply_run_metadata(event, run_config)
    await writer.append_event(ctx.session, event)
    failpoints.hit("runner.message_committed")  # the user's event is in; no agent ran yet
    return event


INTERNAL_METADATA_PREFIX = "__adk_internal_"
"""``custom_metadata`` keys with this prefix belong to the framework; callers cannot set them."""


def apply_run_metadata(event: Event, run_config: RunConfig) -> None:
    """Merge ``run_config.custom_metadata`` into the event's (the event's own keys win).

    Every event of the invocation gets it, as in google-adk: the user's, the agents', partial
    ones too. Keys with the framework's internal prefix are left out.
    """
    if not run_config.custom_metadata:
        return
    metadata = {
        key: value for key, value in run_config.custom_metadata.items()
        if not (isinstance(key, str) and key.startswith(INTERNAL_METADATA_PREFIX))
    }
    if metadata:
        event.custom_metadata = {**metadata, **(event.custom_metadata or {})}


def validate_new_message(message: types.Content | None) -> None:
    """Refuse a user message with function calls, or with both answers and text."""
    if message is None or not message.parts:
        return
    has_response = any(p.function_response for p in message.parts)
    if any(p.function_call for p in message.parts):
        raise ValueError("User message cannot contain function calls.")
    if has_response and any(p.text for p in message.parts):
        raise ValueError(
            "A message cannot contain both function responses and text; send them separately."
        )
