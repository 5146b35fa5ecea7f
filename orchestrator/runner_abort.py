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
from collections import defaultdict
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator.events.event import Event

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.sessions.session import Session

ABORTED_CODE = "INVOCATION_ABORTED"
ABORTED_MESSAGE = "Invocation was aborted by client."


async def until_aborted(
    events: AsyncGenerator[Event, None], ctx: InvocationContext
) -> AsyncGenerator[Event, None]:
    """The agent's ``events`` until they end or the caller's abort signal is set.

    The agent runs in one task of its own (as in google-adk: what it keeps open across its
    steps, a context variable or a cancel scope, stays in that task), handing each event
    over and waiting until it is committed before it goes on. Once the signal is set no
    step starts, and a step under way (a model or tool call being awaited) is cancelled;
    so is the agent when the caller stops reading.
    """
    signal = ctx.abort_signal
    assert signal is not None
    handed: asyncio.Queue[tuple[Event | None, asyncio.Event | None, BaseException | None]] = (
        asyncio.Queue(maxsize=1))

    async def run_agent() -> None:
        async with contextlib.aclosing(events):
            try:
                async for event in events:
                    committed = asyncio.Event()
                    await handed.put((event, committed, None))
                    await committed.wait()
            except Exception as error:  # raised by the agent: the caller's to see
                await handed.put((None, None, error))
                return
        await handed.put((None, None, None))

    agent = asyncio.create_task(run_agent())
    aborted = asyncio.ensure_future(signal.wait())
    taken: asyncio.Future[Any] | None = None
    try:
        while not signal.is_set():
            taken = asyncio.ensure_future(handed.get())
            await asyncio.wait((taken, aborted), return_when=asyncio.FIRST_COMPLETED)
            if not taken.done():
                return
            event, committed, error = taken.result()
            if error is not None:
                raise error
            if event is None or committed is None:
                return
            yield event
            if signal.is_set():
                return
            committed.set()
    finally:
        for waiting in (aborted, taken):
            if waiting is not None:
                waiting.cancel()
        agent.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await agent


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
