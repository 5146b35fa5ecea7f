"""Transfers that are hops: which agents' transfers end their runs, and where a run goes on.

Under a root LlmAgent a transfer is a hop, as in google-adk 2.13's node runtime: the agent
that transfers ends its run there and the Runner runs the target next. Read from the
committed log, these say whether a transfer is a hop, whether the log ends with a hop not
taken yet, and which agent a run continuing a resumable invocation runs (see
:mod:`orchestrator.agents.agent_runs` for how the runs of a paused invocation are read).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orchestrator.events.event import Event, call_author

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent


def transfers_by_hop(root: BaseAgent, name: str) -> bool:
    """True if a transfer made by agent ``name`` is a hop: its run ends at the transfer.

    As in google-adk 2.13, whose node runtime (a root LlmAgent) schedules the root and
    each transfer target itself: an LlmAgent with only LlmAgents above it up to ``root``
    runs at the top of the invocation. One under a workflow agent runs inside it, and its
    transfer runs the target inside its own run (google-adk's legacy path).
    """
    from orchestrator.agents.llm_agent import LlmAgent

    agent = root.find_agent(name)
    if agent is None or not isinstance(root, LlmAgent):
        return False
    while agent is not None and agent is not root:
        if not isinstance(agent, LlmAgent):
            return False
        agent = agent.parent_agent
    return agent is root


def unfinished_hop(
    root: BaseAgent, events: list[Event], invocation_id: str
) -> tuple[str, str] | None:
    """``(agent, target)`` if the invocation's log ends with a transfer hop not taken yet.

    Its last events are ``agent``'s transfer (and, in a resumable app, its
    ``end_of_agent``): the run that committed them stopped before running ``target``.
    """
    ended: str | None = None
    for event in reversed(events):  # from the end: read as every continued run starts
        if event.invocation_id != invocation_id or event.partial:
            continue
        if ended is None and event.actions.end_of_agent and not event.content:
            ended = event.author
            continue
        target = event.actions.transfer_to_agent
        if (not target or event.author == "user" or ended not in (None, event.author)
                or not transfers_by_hop(root, event.author)):
            return None
        return event.author, target
    return None


def agent_to_continue(
    root: BaseAgent, events: list[Event], invocation_id: str, routed: Callable[[], BaseAgent]
) -> BaseAgent | None:
    """The agent a run continuing a resumable invocation runs, when transfers are hops.

    The agents that transferred ended their runs (their ``end_of_agent`` is logged), so the
    root is not the way down, as it is under a workflow agent: the run goes on in the agent
    its log leaves under way (google-adk's node runtime runs the author of the answered
    call), or its outermost checkpointed agent above. A hop not taken yet is finished by
    the agent that made it, if it has not ended, else the target runs. Before any agent
    said anything, the ``routed`` agent (the turn's). None: nothing is left to do.
    """
    from orchestrator.agents.invocation_history import invocation_agent_states

    mine = [e for e in events if e.invocation_id == invocation_id and not e.partial]
    states, ends = invocation_agent_states(mine, invocation_id, root)
    if (hop := unfinished_hop(root, mine, invocation_id)) is not None:
        return root.find_agent(hop[1] if ends.get(hop[0]) else hop[0])
    last = mine[-1] if mine else None
    agent: BaseAgent | None
    if last is None or (last.author == "user" and not last.get_function_responses()):
        return routed()
    if responses := last.get_function_responses():
        # An answer (the user's, or a worker's committed in the calling agent's name): the
        # agent that made the call goes on, even one that ended before (as google-adk).
        agent = root.find_agent(call_author(mine, responses[0].id) or last.author)
    else:
        agent = root.find_agent(last.author)
        while agent is not None and ends.get(agent.name):
            agent = agent.parent_agent
    if agent is None:
        return None
    return outermost_checkpointed(agent, states)


def outermost_checkpointed(agent: BaseAgent, states: dict[str, dict[str, Any]]) -> BaseAgent:
    """``agent``, or its outermost ancestor reached through agents under way (checkpointed)."""
    while agent.parent_agent is not None and agent.parent_agent.name in states:
        agent = agent.parent_agent
    return agent
