"""ParallelAgent: runs sub-agents concurrently, each on its own branch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from orchestrator.agents.base_agent import BaseAgent, BaseAgentState
from orchestrator.events.event import Event

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext

_DONE = object()


def parallel_branch(ctx: InvocationContext, parallel: BaseAgent, sub: BaseAgent) -> str:
    """The branch of a parallel sub-agent: ``<parent branch.>parallel.sub``."""
    own = f"{parallel.name}.{sub.name}"
    return f"{ctx.branch}.{own}" if ctx.branch else own


class ParallelAgent(BaseAgent):
    """Runs every sub-agent at once; histories are isolated by branch, state is shared.

    Each branch waits until its previous event was committed before producing the next.
    A branch error cancels the others; an ``escalate`` from a direct sub-agent does too.
    """

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        if not self.sub_agents:
            return
        queue = (
            ctx.transport.route_agent(self)
            if ctx.transport is not None and ctx.is_resumable else None
        )
        if queue:
            from orchestrator.agents.remote_branches import run_branches_remotely

            async for event in run_branches_remotely(self, ctx, queue):
                yield event
            return
        if ctx.is_resumable and self.name not in ctx.agent_states:
            ctx.set_agent_state(self.name, agent_state=BaseAgentState())
            yield self._create_agent_state_event(ctx)
        pending = [
            sub for sub in self.sub_agents
            if not (ctx.is_resumable and ctx.end_of_agents.get(sub.name))
        ]
        runs = [
            sub.run_async(ctx.model_copy(update={"branch": parallel_branch(ctx, self, sub)}))
            for sub in pending
        ]
        direct = {sub.name for sub in self.sub_agents}
        paused = escalated = False
        async for event in merge_with_backpressure(runs):
            yield event
            paused = paused or ctx.should_pause_invocation(event)
            if event.actions.escalate and event.author in direct:
                escalated = True
                break
        paused = paused or any(ctx.is_paused(sub.name) for sub in pending)
        if paused and not escalated:
            ctx.mark_paused(self.name)
        if ctx.is_resumable and (escalated or not paused):
            ctx.set_agent_state(self.name, end_of_agent=True)
            yield self._create_agent_state_event(ctx)


async def merge_with_backpressure(
    runs: list[AsyncGenerator[Event, None]],
) -> AsyncGenerator[Event, None]:
    """Interleave generators in arrival order; each waits until its event was consumed.

    Closing this generator (or an error in any run) cancels every run still going.
    """
    queue: asyncio.Queue[tuple[Any, asyncio.Event | None]] = asyncio.Queue()

    async def drive(run: AsyncGenerator[Event, None]) -> None:
        try:
            async for event in run:
                consumed = asyncio.Event()
                await queue.put((event, consumed))
                await consumed.wait()
        except Exception as error:  # handed to the consumer, which re-raises it
            await queue.put((error, None))
        finally:
            await queue.put((_DONE, None))

    tasks = [asyncio.ensure_future(drive(run)) for run in runs]
    remaining = len(tasks)
    try:
        while remaining:
            item, consumed = await queue.get()
            if item is _DONE:
                remaining -= 1
                continue
            if isinstance(item, Exception):
                raise item
            yield item
            assert consumed is not None
            consumed.set()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
