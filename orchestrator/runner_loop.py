"""The loop of one Runner run: the agent yields an event, it is committed, the agent goes on.

``Runner.run_async``, ``continue_async`` and ``recover_async`` each set up their context and
what the run starts from, then hand over here: the plugins' run callbacks go around the run
(:mod:`orchestrator.runner_plugins`); a recovered run first ends what it owes
(:mod:`orchestrator.runner_ends`); then the agent the log says is next runs
(:mod:`orchestrator.runner_routing`), and each agent it transfers to after it; an aborted
run is sealed (:mod:`orchestrator.runner_abort`), any other ends the runs it took up.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING

from orchestrator import failpoints
from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.events.event import Event
from orchestrator.runner_abort import abort_events, until_aborted
from orchestrator.runner_ends import end_unfinished_runs, run_owed_ends
from orchestrator.runner_messages import apply_run_metadata
from orchestrator.runner_plugins import EventSource, process_event, run_with_plugins
from orchestrator.runner_routing import agent_to_run, continued_branch

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.sessions.base_session_service import SessionWriter
    from orchestrator.sessions.session import Session


def commit_run(
    ctx: InvocationContext,
    session: Session,
    writer: SessionWriter,
    opening: EventSource,
    body: EventSource,
) -> AsyncGenerator[Event, None]:
    """``opening()``'s events, then ``body()``'s, with the plugins' run callbacks around them.

    The event a ``before_run_callback`` ends the run with passes ``on_event_callback`` and
    is committed (unless partial) here; ``opening`` and ``body`` commit their own.
    """
    async def commit(event: Event) -> Event:
        event = await process_event(ctx, event)
        if not event.partial:
            await writer.append_event(session, event)
        return event

    return run_with_plugins(ctx, opening, body, commit)


async def run_agent(
    ctx: InvocationContext,
    session: Session,
    root: BaseAgent,
    writer: SessionWriter,
    *,
    resuming: bool,
    resumable: bool,
    call_event: Event | None,
    answered: bool = False,
    owed: Sequence[Event] = (),
) -> AsyncGenerator[Event, None]:
    """Pick the agent, run it, and commit each non-partial event before yielding it.

    ``root``: the Runner's root agent; ``resumable``: whether its app is resumable.
    ``answered``: a recovered run whose agent's final answer is in the log re-enters no
    agent; it only ends the runs it takes up (see ``orchestrator.agents.agent_runs``).
    ``owed``: the ``end_of_agent`` events of a recovered run whose agents' after-callbacks
    did not finish (``ends_owed``); they run first, before any agent is picked.
    """
    async with contextlib.aclosing(
            run_owed_ends(ctx, session, writer, root, owed)) as ends:
        async for event in ends:
            yield event
    agent = None if answered else agent_to_run(ctx, session, root, resuming, resumable)
    if agent is None and not answered:
        return
    if agent is not None:
        ctx.branch = continued_branch(session, agent, root, call_event)
    # A root LlmAgent's transfers are hops (google-adk 2.13's node runtime): the agent
    # that transferred ends its run, and the target runs next, here.
    hops = isinstance(root, LlmAgent)
    while agent is not None:
        ctx.agent = agent
        ctx.schedule(agent, hops=hops)
        async with contextlib.aclosing(agent.run_async(ctx)) as events:
            steps = events if ctx.abort_signal is None else until_aborted(events, ctx)
            async with contextlib.aclosing(steps):  # its agent task ends with it
                async for event in steps:
                    apply_run_metadata(event, ctx.run_config)
                    event = await process_event(ctx, event)
                    if not event.partial:
                        await writer.append_event(session, event)
                    yield event
        agent = None if ctx.is_aborted else ctx.take_hop()
        if agent is not None:
            failpoints.hit("runner.transfer_hop")  # the agent that transferred ended
    if ctx.is_aborted:
        for event in abort_events(session, ctx, root.name):
            event = await process_event(ctx, event)
            await writer.append_event(session, event)
            yield event
        return
    # Agents under way before the pause that this run did not re-enter (they
    # transferred to the agent it continued) end with it, innermost first.
    async with contextlib.aclosing(
            end_unfinished_runs(ctx, session, writer, root)) as ends:
        async for event in ends:
            yield event
