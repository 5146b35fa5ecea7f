"""SequentialAgent: runs its sub-agents one after another on the same branch."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from orchestrator.agents.base_agent import BaseAgent, BaseAgentState
from orchestrator.events.event import Event

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext


class SequentialAgentState(BaseAgentState):
    """Checkpoint: the sub-agent that is running."""

    current_sub_agent: str = ""


class SequentialAgent(BaseAgent):
    """Runs sub-agents in order; stops after a sub-agent that paused the invocation."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        if not self.sub_agents:
            return
        state = self._load_agent_state(ctx, SequentialAgentState)
        start = sub_agent_index(self, state.current_sub_agent) if state else 0
        resuming = state is not None
        for sub in self.sub_agents[start:]:
            if resuming and ctx.end_of_agents.get(sub.name):
                resuming = False  # it finished before the stop: go on with the next one
                continue
            if ctx.is_resumable and not resuming:
                ctx.set_agent_state(
                    self.name, agent_state=SequentialAgentState(current_sub_agent=sub.name)
                )
                yield self._create_agent_state_event(ctx)
            resuming = False
            paused = False
            async for event in sub.run_async(ctx):
                yield event
                paused = paused or ctx.should_pause_invocation(event)
            if paused or ctx.is_paused(sub.name):
                ctx.mark_paused(self.name)
                return
        if ctx.is_resumable:
            ctx.set_agent_state(self.name, end_of_agent=True)
            yield self._create_agent_state_event(ctx)


def sub_agent_index(agent: BaseAgent, name: str) -> int:
    """Index of the sub-agent ``name``; a checkpoint naming an unknown agent cannot resume."""
    for i, sub in enumerate(agent.sub_agents):
        if sub.name == name:
            return i
    raise ValueError(
        f"Cannot resume agent {agent.name!r}: its checkpoint names sub-agent {name!r}, which "
        "is not in the agent tree any more. The invocation was recorded with a different tree."
    )
