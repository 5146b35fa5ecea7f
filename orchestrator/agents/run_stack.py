"""The run stack: the agents under way in an invocation's current run, read from its log.

A run of an invocation starts at its latest event from outside (the user's message, an
answer from outside). The agents under way in it are its first agent and each transfer's
target (a non-resumable app), or the way a resumed root goes down to an agent through its
checkpoints (a resumable app). See :mod:`orchestrator.agents.agent_runs` for what the
Runner does with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.agents.transfer_hops import outermost_checkpointed, transfers_by_hop
from orchestrator.events.event import Event

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent


class RunStack:
    """The agents under way in an invocation's current run, read from its log."""

    def __init__(
        self, root: BaseAgent, events: list[Event], invocation_id: str, resumable: bool
    ) -> None:
        from orchestrator.agents.invocation_history import invocation_agent_states

        self.root = root
        """The invocation's root agent."""
        self._resumable = resumable
        mine = [e for e in events if e.invocation_id == invocation_id and not e.partial]
        # The current run of the invocation started at its latest event from outside (the
        # user's message, an answer from outside): a continuation for workers starts none.
        start = max((i for i, e in enumerate(mine) if e.author == "user"), default=-1)
        self.since_start = mine[start + 1:]
        """The invocation's committed events since the current run started."""
        if resumable:
            self._states, self._ends = invocation_agent_states(mine, invocation_id, root)

    def taken_up_with(self, name: str) -> list[str]:
        """Outermost first, the agents a continued run takes up to continue agent ``name``."""
        if self._resumable:
            return self._descent(name)
        stack = self.transfers()
        return stack if stack and stack[-1] == name else [name]

    def _descent(self, name: str) -> list[str]:
        """The agents a resumed root goes down through to ``name``, ``name`` included.

        As the agents resume: a SequentialAgent or LoopAgent its checkpoint's sub-agent, a
        ParallelAgent each sub-agent not ended, an LlmAgent the outermost agent above
        ``name`` below it whose ancestors up to it are all checkpointed. A root that is not
        checkpointed is not resumed (the answer goes to ``name`` directly): ``[name]``, as
        for any way down this cannot tell. Under a root LlmAgent the way down starts at
        the outermost checkpointed agent above ``name`` (an agent that transferred ended).
        """
        from orchestrator.agents.llm_agent import LlmAgent
        from orchestrator.agents.loop_agent import LoopAgent
        from orchestrator.agents.parallel_agent import ParallelAgent
        from orchestrator.agents.sequential_agent import SequentialAgent

        target = self.root.find_agent(name)
        path: list[BaseAgent] = []
        agent = target
        while agent is not None:
            path.insert(0, agent)
            agent = agent.parent_agent
        if target is None:
            return [name]
        if isinstance(self.root, LlmAgent):
            # Transfers are hops: the run starts at the outermost checkpointed agent above
            # ``name`` (see agent_to_continue), not at the root, whose run ended.
            at = path.index(outermost_checkpointed(target, self._states))
        elif path[0].name in self._states:
            at = 0
        else:
            return [name]
        taken = [path[at].name]
        while at < len(path) - 1:
            current, child = path[at], path[at + 1]
            if isinstance(current, LlmAgent):
                below = len(path) - 1
                while below - 1 > at and path[below - 1].name in self._states:
                    below -= 1
                at = below
            elif isinstance(current, LoopAgent) or (
                    isinstance(current, SequentialAgent | ParallelAgent)
                    and not self._ends.get(child.name)):
                at += 1
            else:  # an agent that ended is passed over; other agents: cannot tell
                return [name]
            taken.append(path[at].name)
        return taken

    def currents(self) -> list[str]:
        """The agents under way when the current run stopped: one per branch, if any.

        Resumable apps. As :meth:`current`, read on each branch's own events: a
        ParallelAgent's branches in process were each under way where their events stop.
        """
        found: list[str] = []
        for branch in dict.fromkeys(e.branch for e in self.since_start):
            name = self.current([e for e in self.since_start if e.branch == branch])
            if name is not None and name not in found:
                found.append(name)
        return found

    def current(self, events: list[Event] | None = None) -> str | None:
        """The agent under way when the current run stopped, if any.

        The author of its last event that is not an answer (in a resumable app, the nearest
        agent above it that has not ended). ``events``: those to read (the run's by default).
        """
        for event in reversed(self.since_start if events is None else events):
            if event.author == "user" or _only_answers(event):
                continue
            agent: BaseAgent | None = self.root.find_agent(event.author)
            if self._resumable:
                while agent is not None and self._ends.get(agent.name):
                    if transfers_by_hop(self.root, agent.name) and (
                            agent.parent_agent is None
                            or agent.parent_agent.name not in self._states):
                        return None  # its run, at the top of the invocation, is over
                    agent = agent.parent_agent
            return agent.name if agent is not None else None
        return None

    def transfers(self) -> list[str]:
        """The agents of the current run, outermost first.

        Its first agent, then each transfer's target: a target runs inside the agent that
        transferred to it.
        """
        stack: list[str] = []
        for event in self.since_start:
            if not stack:
                stack.append(event.author)
            target = event.actions.transfer_to_agent
            if target and event.author == stack[-1] and target != stack[-1]:
                if transfers_by_hop(self.root, event.author):
                    stack = []  # a hop: the run of the agent that transferred is over
                stack.append(target)
        return stack


def _only_answers(event: Event) -> bool:
    """True for an event that carries function responses and nothing else an agent said."""
    return bool(event.get_function_responses()) and not event.get_function_calls() and not any(
        p.text for p in (event.content.parts if event.content and event.content.parts else [])
    )
