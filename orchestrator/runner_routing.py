"""Where a Runner call lands in a session: the invocation it continues, the agent, the branch.

A message made of function responses continues the invocation whose calls they answer; the
agent that runs a turn follows ADK's routing rules (adk-reference §3.6): the author of the
answered call, else the last transferable agent that spoke, else the root. A resumed
invocation goes on where its log leaves it (:func:`agent_to_run`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.agents.base_agent import BaseAgent
from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.agents.transfer_hops import agent_to_continue, unfinished_hop
from orchestrator.events.event import Event, call_author
from orchestrator.flows.contents import apply_rewinds
from orchestrator.sessions.session import Session

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext

logger = logging.getLogger(__name__)


def resolve_invocation_from_responses(
    session: Session, responses: list[types.FunctionResponse], invocation_id: str | None
) -> tuple[str | None, Event | None]:
    """Find the invocation (and call event) that function responses answer."""
    ids = [r.id for r in responses if r.id]
    if not ids:
        return invocation_id, None
    found: dict[str, Event] = {}
    for event in reversed(apply_rewinds(session.events)):
        for call in event.get_function_calls():
            if call.id in ids and call.id not in found:
                found[call.id] = event
    missing = [i for i in ids if i not in found]
    if missing:
        raise ValueError(f"Function call not found for function response ids: {missing}")
    invocations = {e.invocation_id for e in found.values()}
    if len(invocations) > 1:
        raise ValueError(
            "Function responses answer calls of several invocations "
            f"({sorted(invocations)}); send them separately."
        )
    resolved = invocations.pop()
    if invocation_id and invocation_id != resolved:
        logger.warning(
            "invocation_id %s ignored: the function responses belong to %s",
            invocation_id, resolved,
        )
    return resolved, found[ids[0]]


def calls_of_invocation(session: Session, invocation_id: str) -> dict[str, Event]:
    """The invocation's function-call events, by call id."""
    return {
        call.id: event
        for event in session.events if event.invocation_id == invocation_id
        for call in event.get_function_calls() if call.id
    }


def has_invocation(session: Session, invocation_id: str | None) -> bool:
    """True if some event of the session belongs to the invocation."""
    return any(e.invocation_id == invocation_id for e in session.events)


def original_user_content(session: Session, invocation_id: str) -> types.Content | None:
    """The user's text message that started the invocation (None if it had none)."""
    for event in session.events:
        if event.invocation_id != invocation_id or event.author != "user":
            continue
        content = event.content
        if content and content.parts and any(p.text for p in content.parts) and not any(
            p.function_response for p in content.parts
        ):
            return content
    return None


def find_agent_to_run(session: Session, root: BaseAgent) -> BaseAgent:
    """Pick the agent for this turn (ADK's routing rules, adk-reference §3.6)."""
    events = apply_rewinds(session.events)
    if events and (responses := events[-1].get_function_responses()):
        owner = call_author(events[:-1], responses[0].id)
        if owner is not None and (agent := root.find_agent(owner)) is not None:
            return agent
    for event in reversed(events):
        if event.author == "user":
            continue
        if (event.actions.end_of_agent or event.actions.agent_state is not None) and not event.content:
            continue
        if event.error_code and not event.content:
            continue
        target = event.actions.transfer_to_agent
        if target and (agent := root.find_agent(target)) is not None and _is_transferable(agent):
            return agent
        if event.author == root.name:
            return root
        agent = root.find_sub_agent(event.author)
        if agent is None:
            logger.warning("Event from unknown agent %s skipped while routing", event.author)
            continue
        if _is_transferable(agent):
            return agent
    return root


def _is_transferable(agent: BaseAgent) -> bool:
    """True if every agent from ``agent`` up to the root is an LlmAgent that allows going up."""
    current: BaseAgent | None = agent
    while current is not None:
        if not isinstance(current, LlmAgent) or current.disallow_transfer_to_parent:
            return False
        current = current.parent_agent
    return True


def continued_branch(
    session: Session, agent: BaseAgent, root: BaseAgent, call_event: Event | None
) -> str | None:
    """The branch ``agent`` continues on: the answered call's, else its last event's (root: none)."""
    if agent is root:
        return None
    if call_event is not None:
        return call_event.branch
    for event in reversed(session.events):
        if event.author == agent.name:
            return event.branch
    return None


def agent_to_run(
    ctx: InvocationContext, session: Session, root: BaseAgent, resuming: bool, resumable: bool
) -> BaseAgent | None:
    """The agent for this run; None when a resumed invocation has nothing left to do."""
    hops = isinstance(root, LlmAgent)  # transfers are hops (see runner_loop.run_agent)
    if not (resuming and resumable):
        if resuming and hops and (hop := unfinished_hop(
                root, session.events, ctx.invocation_id)) is not None:
            # The run that made the transfer stopped before its target ran: the agent
            # that transferred finishes its hop (it is taken up, without callbacks).
            return root.find_agent(hop[0])
        return find_agent_to_run(session, root)
    ctx.populate_invocation_agent_states()
    for name in list(ctx.agent_states) + list(ctx.end_of_agents):
        if root.find_agent(name) is None:
            raise ValueError(
                f"Cannot resume invocation {ctx.invocation_id!r}: agent {name!r} in its "
                "log is not in the current agent tree. Resume it with the tree it was "
                "started with."
            )
    if hops:
        return agent_to_continue(root, session.events, ctx.invocation_id,
                                 lambda: find_agent_to_run(session, root))
    if root.name in ctx.agent_states or root.name in ctx.end_of_agents:
        agent = root
    else:
        agent = find_agent_to_run(session, root)
    if ctx.end_of_agents.get(agent.name):
        return None
    return agent
