"""``run_async(abort_signal=...)``: an invocation its caller aborts, as google-adk 2.13 ends one.

Once the signal is set, the agent is not resumed (a tool whose call was just yielded does
not run), and a step under way (a model or tool call being awaited) is cancelled. The
invocation is then sealed in the session: each of its calls left without an answer gets
an error answer saying it was aborted (so the model sees why on a later turn, and no
side-effecting tool runs for it later), or, with nothing left open, one content-less event
says so. Those events carry ``error_code="INVOCATION_ABORTED"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.events.event import Event

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.sessions.session import Session

ABORTED_CODE = "INVOCATION_ABORTED"
ABORTED_MESSAGE = "Invocation was aborted by client."


async def until_aborted(
    events: AsyncIterator[Event], ctx: InvocationContext
) -> AsyncGenerator[Event, None]:
    """The agent's ``events`` until they end or the caller's abort signal is set.

    Each step of the agent runs as a task racing the signal (every step in the same
    context, so what the agent keeps in context variables lasts from one step to the next);
    the signal cancels a step under way, and no step starts once it is set.
    """
    signal = ctx.abort_signal
    assert signal is not None
    context = contextvars.copy_context()
    gen = events if isinstance(events, AsyncGenerator) else None

    async def step() -> Event:
        return await anext(events)

    async def close() -> None:
        if gen is not None:
            await gen.aclose()

    aborted = asyncio.ensure_future(signal.wait())
    try:
        while not signal.is_set():
            task = asyncio.create_task(step(), context=context)
            await asyncio.wait((task, aborted), return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await task
                return
            try:
                event = task.result()
            except StopAsyncIteration:
                return
            yield event
    finally:
        aborted.cancel()
        # The agent's own cleanup runs in the context its steps ran in (a context variable
        # it set in one is reset in the same).
        await asyncio.create_task(close(), context=context)


def abort_events(session: Session, ctx: InvocationContext, root_name: str) -> list[Event]:
    """The events sealing the aborted invocation of ``ctx`` in ``session``.

    One event per agent and branch whose calls of this invocation have no answer, each
    such call answered with an error; with none open, one event authored by the root agent.
    """
    invocation = [e for e in session.events if e.invocation_id == ctx.invocation_id]
    answered = {r.id for e in invocation for r in e.get_function_responses() if r.id}
    open_calls: dict[tuple[str, str | None], list[types.FunctionCall]] = defaultdict(list)
    for event in invocation:
        for call in event.get_function_calls():
            if call.id and call.id not in answered:
                open_calls[(event.author, event.branch or ctx.branch)].append(call)
    if not open_calls:
        return [Event(invocation_id=ctx.invocation_id, author=root_name, branch=ctx.branch,
                      error_code=ABORTED_CODE, error_message=ABORTED_MESSAGE)]
    return [
        Event(
            invocation_id=ctx.invocation_id, author=author, branch=branch,
            content=types.Content(role="user", parts=[
                types.Part(function_response=types.FunctionResponse(
                    id=call.id, name=call.name, response={"error": ABORTED_MESSAGE}))
                for call in calls
            ]),
            error_code=ABORTED_CODE, error_message=ABORTED_MESSAGE,
        )
        for (author, branch), calls in open_calls.items()
    ]
