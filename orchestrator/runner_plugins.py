"""The plugins' run callbacks around one Runner run: user message, before/after run, events.

One run is one call of ``Runner.run_async``, ``continue_async`` or ``recover_async``: an
invocation that pauses for remote calls and is continued later runs several times, and
the plugins see each run, as google-adk's do for each ``run_async`` that answers a
long-running call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.events.event import Event
from orchestrator.runner_threads import CALLER_CLOSED_EARLY

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.sessions.base_session_service import SessionWriter
    from orchestrator.sessions.session import Session

logger = logging.getLogger(__name__)

_KEPT_FIELDS = frozenset({"id", "invocation_id", "timestamp"})
"""What a plugin's replacement event cannot change: the event stays the same event."""

EventSource = Callable[[], AsyncGenerator[Event, None]]


async def no_events() -> AsyncGenerator[Event, None]:
    """An event source with nothing in it (a run that starts from what is committed)."""
    return
    yield  # pragma: no cover  (makes this an async generator)


async def process_event(ctx: InvocationContext, event: Event) -> Event:
    """``event`` as the plugins' ``on_event_callback`` leaves it (itself if none changes it).

    A returned event is merged onto a copy of the original: the fields it set explicitly
    replace the original's, except id, invocation id and timestamp; an empty author keeps
    the original one.
    """
    if not ctx.plugin_manager.plugins:
        return event
    modified = await ctx.plugin_manager.run_on_event_callback(
        invocation_context=ctx, event=event
    )
    if modified is None:
        return event
    update = {
        name: getattr(modified, name)
        for name in modified.model_fields_set if name not in _KEPT_FIELDS
    }
    merged = event.model_copy(update=update)
    if not merged.author:
        merged.author = event.author
    return merged


async def replace_user_message(
    ctx: InvocationContext, message: types.Content
) -> types.Content | None:
    """The plugins' replacement of the user's ``message``, or None to keep it."""
    if not ctx.plugin_manager.plugins:
        return None
    return await ctx.plugin_manager.run_on_user_message_callback(
        invocation_context=ctx, user_message=message
    )


async def commit_answers(
    ctx: InvocationContext, session: Session, writer: SessionWriter, answers: list[Event]
) -> AsyncGenerator[Event, None]:
    """Commit answers to calls of the invocation; yield each as committed.

    A user's answer goes through ``on_user_message_callback`` (as a function-response
    message to ``run_async`` does), any other (a worker's result, a branch's events) through
    ``on_event_callback``. Answers are committed whatever the plugins do next: dropping one
    would leave its call open for ever.
    """
    for answer in answers:
        if answer.author != "user":
            answer = await process_event(ctx, answer)
        elif answer.content is not None:
            replaced = await replace_user_message(ctx, answer.content)
            if replaced is not None:
                answer = answer.model_copy(update={"content": replaced})
        await writer.append_event(session, answer)
        yield answer


async def run_with_plugins(
    ctx: InvocationContext,
    opening: EventSource,
    body: EventSource,
    commit: Callable[[Event], Awaitable[Event]],
) -> AsyncGenerator[Event, None]:
    """Yield ``opening()``'s events, then ``body()``'s, with the run callbacks around them.

    ``opening`` commits what the run starts from (the user's message, answers);
    ``before_run_callback`` comes after it: content it returns ends the run with one event
    by ``model`` (committed with ``commit``) instead of ``body``. ``after_run_callback`` runs
    when the run ends without an error, also when the caller stops reading early; an
    exception leaving the run is told to ``on_run_error_callback`` and raised.
    """
    plugins = ctx.plugin_manager
    failed = False
    closed_early = False
    try:
        async with contextlib.aclosing(opening()) as events:
            async for event in events:
                yield event
        early_exit = await plugins.run_before_run_callback(invocation_context=ctx)
        if isinstance(early_exit, types.Content):
            yield await commit(
                Event(invocation_id=ctx.invocation_id, author="model", content=early_exit)
            )
        else:
            async with contextlib.aclosing(body()) as events:
                async for event in events:
                    yield event
    except GeneratorExit:
        closed_early = True  # the caller stopped reading: a normal end of the run
        raise
    except Exception as error:
        failed = True
        await plugins.run_on_run_error_callback(invocation_context=ctx, error=error)
        raise
    except asyncio.CancelledError as error:
        # Cancelled because the synchronous caller stopped reading (``Runner.run``): a
        # normal end, as a closed generator is; any other cancel is not a finished run.
        if error.args and error.args[0] == CALLER_CLOSED_EARLY:
            closed_early = True
        else:
            failed = True
        raise
    except BaseException:  # interrupted: not a finished run
        failed = True
        raise
    finally:
        if not failed:
            try:
                await plugins.run_after_run_callback(invocation_context=ctx)
            except Exception as error:
                await plugins.run_on_run_error_callback(invocation_context=ctx, error=error)
                if not closed_early:
                    raise
                logger.exception(
                    "after_run_callback failed while invocation %s was closed early",
                    ctx.invocation_id,
                )
