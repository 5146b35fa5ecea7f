"""The ends a run owes to agents it does not re-enter: their ``after_agent`` callbacks.

Two kinds, both read from the log before the run (:mod:`orchestrator.agents.agent_runs`):
a recovered resumable run first ends the agents whose ``end_of_agent`` is committed but
whose after-callbacks did not finish (``ends_owed``); a continued run, after its agent,
ends the runs under way before the pause that it did not re-enter (they transferred to the
agent it continued), innermost first. Each end commits at most one event.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING

from orchestrator.events.event import Event
from orchestrator.runner_messages import apply_run_metadata
from orchestrator.runner_plugins import process_event

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.sessions.base_session_service import SessionWriter
    from orchestrator.sessions.session import Session


async def run_owed_ends(
    ctx: InvocationContext,
    session: Session,
    writer: SessionWriter,
    root: BaseAgent,
    owed: Sequence[Event],
) -> AsyncGenerator[Event, None]:
    """Run the after-callbacks of the agents whose ``owed`` ends did not finish; yield each commit."""
    for end in owed:
        ended = root.find_agent(end.author)
        if ended is None or ctx.is_aborted:
            continue
        event = await ended.end_run(
            ctx.model_copy(update={"agent": ended, "branch": end.branch}))
        if event is not None:
            apply_run_metadata(event, ctx.run_config)
            event = await process_event(ctx, event)
            await writer.append_event(session, event)
            yield event


async def end_unfinished_runs(
    ctx: InvocationContext,
    session: Session,
    writer: SessionWriter,
    root: BaseAgent,
) -> AsyncGenerator[Event, None]:
    """End the runs under way before the pause that this run did not re-enter; yield each commit.

    Innermost first; an agent still waiting for workers goes on waiting (its run is not over).
    """
    for name in reversed(ctx.counters.unfinished):
        outer = root.find_agent(name)
        if outer is None or ctx.is_aborted or ctx.waits_for_workers(name):
            continue
        event = await outer.end_run(ctx.model_copy(update={"agent": outer}))
        if event is not None:
            apply_run_metadata(event, ctx.run_config)
            event = await process_event(ctx, event)
            await writer.append_event(session, event)
            yield event
