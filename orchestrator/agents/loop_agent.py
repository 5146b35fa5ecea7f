"""LoopAgent: runs its sub-agents in order, repeatedly, until escalation or max_iterations."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from orchestrator.agents.base_agent import BaseAgent, BaseAgentState
from orchestrator.agents.sequential_agent import sub_agent_index
from orchestrator.events.event import Event

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext


class LoopAgentState(BaseAgentState):
    """Checkpoint: the running sub-agent and how many full iterations are done."""

    current_sub_agent: str = ""
    times_looped: int = 0


class LoopAgent(BaseAgent):
    """Loops over sub-agents; an ``escalate`` action (e.g. ``exit_loop``) ends the loop."""

    max_iterations: int | None = None
    """Iterations to run; None loops until escalation."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        if not self.sub_agents:
            return
        state = self._load_agent_state(ctx, LoopAgentState)
        times_looped = state.times_looped if state else 0
        start = sub_agent_index(self, state.current_sub_agent) if state else 0
        resuming = state is not None
        escalated = False
        while not escalated and (self.max_iterations is None or times_looped < self.max_iterations):
            for sub in self.sub_agents[start:]:
                if resuming and self._ended_since_checkpoint(ctx, sub.name):
                    # It ended before the stop (its after-callbacks, if owed, ran before
                    # this): the loop goes on after it, as SequentialAgent does.
                    resuming = False
                    if self._escalated_in_log(ctx):
                        escalated = True
                        break
                    continue
                if ctx.is_resumable and not resuming:
                    checkpoint = LoopAgentState(current_sub_agent=sub.name, times_looped=times_looped)
                    ctx.set_agent_state(self.name, agent_state=checkpoint)
                    yield self._create_agent_state_event(ctx)
                resuming = False
                paused = False
                async for event in sub.run_async(ctx):
                    yield event
                    escalated = escalated or bool(event.actions.escalate)
                    paused = paused or ctx.should_pause_invocation(event)
                if paused or ctx.is_paused(sub.name):
                    ctx.mark_paused(self.name)
                    return
                escalated = escalated or (ctx.is_resumable and self._escalated_in_log(ctx))
                if escalated:
                    break
            start = 0
            times_looped += 1
            # Sub-agents (and theirs, all the way down) start fresh on every iteration.
            ctx.reset_sub_agent_states(self.name)
        if ctx.is_resumable:
            ctx.set_agent_state(self.name, end_of_agent=True)
            yield self._create_agent_state_event(ctx)

    def _ended_since_checkpoint(self, ctx: InvocationContext, name: str) -> bool:
        """True if sub-agent ``name`` committed its end after this loop's last checkpoint.

        Read from the log. The end flags rebuilt from it say the same (an end of an earlier
        iteration no longer counts from this loop's next checkpoint on: see
        ``invocation_agent_states``).
        """
        for event in reversed(ctx.session.events):
            if event.invocation_id != ctx.invocation_id:
                continue
            if event.author == self.name and event.actions.agent_state is not None:
                return False
            if event.author == name and event.actions.end_of_agent:
                return True
        return False

    def _escalated_in_log(self, ctx: InvocationContext) -> bool:
        """True if an event committed since this sub-agent's checkpoint escalates.

        The events of ParallelAgent branches that ran on workers are committed as their
        results come back, not passed up through the sub-agent's run: their escalation
        (``exit_loop``) is read from the log.
        """
        for event in reversed(ctx.session.events):
            if event.invocation_id != ctx.invocation_id:
                continue
            if event.author == self.name and event.actions.agent_state is not None:
                return False  # this iteration's checkpoint: nothing since escalated
            if event.actions.escalate:
                return True
        return False
