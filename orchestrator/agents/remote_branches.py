"""A ParallelAgent whose branches run on workers (distributed mode, resumable apps).

The agent commits one dispatch event: a call ``adk_celery_run_branch`` per branch, all of
them long-running, and the invocation pauses. Each branch's events come back on its branch,
followed by the answer to its call. When the agent runs again (the invocation resumes) it
checks its calls: a branch that paused on a worker and whose own pending calls have since
been answered is continued here; once every call is answered, the agent ends as in process.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator import failpoints, platform
from orchestrator.agents.base_agent import BaseAgentState
from orchestrator.agents.parallel_agent import parallel_branch
from orchestrator.distributed.ledger import CallLedger
from orchestrator.distributed.models import AgentJob
from orchestrator.errors import RemoteBranchError
from orchestrator.events.event import Event
from orchestrator.flows.contents import RUN_BRANCH, belongs_to_branch, on_or_below
from orchestrator.flows.remote_calls import json_snapshot

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.sessions.session import Session


def _dispatch_event(ctx: InvocationContext, agent: BaseAgent) -> Event | None:
    """The dispatch of the agent's current run, if it made one.

    Only a run under way has one (the agent's checkpoint is in): a run that starts afresh
    (a LoopAgent's next iteration) dispatches its branches again.
    """
    if agent.name not in ctx.agent_states:
        return None
    for event in reversed(ctx.session.events):
        if (
            event.invocation_id == ctx.invocation_id
            and event.author == agent.name
            and event.branch == ctx.branch
            and any(c.name == RUN_BRANCH for c in event.get_function_calls())
        ):
            return event
    return None


async def run_branches_remotely(
    agent: BaseAgent, ctx: InvocationContext, queue: str
) -> AsyncGenerator[Event, None]:
    """Dispatch the branches, or on resume, finish what the branches left."""
    dispatch = _dispatch_event(ctx, agent)
    if dispatch is None:
        async for event in _dispatch(agent, ctx, queue):
            yield event
        return
    async for event in _collect(agent, ctx, dispatch):
        yield event


async def _dispatch(
    agent: BaseAgent, ctx: InvocationContext, queue: str
) -> AsyncGenerator[Event, None]:
    if agent.name not in ctx.agent_states:
        ctx.set_agent_state(agent.name, agent_state=BaseAgentState())
        yield agent._create_agent_state_event(ctx)
    subs = [s for s in agent.sub_agents if not ctx.end_of_agents.get(s.name)]
    calls = [
        types.FunctionCall(
            id=platform.new_function_call_id(), name=RUN_BRANCH,
            args={"agent": sub.name, "branch": parallel_branch(ctx, agent, sub)},
        )
        for sub in subs
    ]
    yield Event(
        invocation_id=ctx.invocation_id,
        author=agent.name,
        branch=ctx.branch,
        content=types.Content(role="model", parts=[types.Part(function_call=c) for c in calls]),
        long_running_tool_ids={c.id for c in calls if c.id},
    )
    # The dispatch event is committed now: only then do the jobs go out.
    assert ctx.transport is not None
    failpoints.hit("dispatch.before_publish")
    branches = [(sub, call, ctx.transport.route_agent(sub) or queue)
                for sub, call in zip(subs, calls, strict=True)]
    for job in branch_jobs(ctx.session, ctx.invocation_id, agent, branches, ctx.user_content):
        await ctx.transport.submit_agent(job)
        failpoints.hit("dispatch.after_one_branch")
    ctx.mark_paused(agent.name)


def branch_jobs(
    session: Session,
    invocation_id: str,
    parallel: BaseAgent,
    branches: list[tuple[BaseAgent, types.FunctionCall, str]],
    user_content: types.Content | None,
) -> list[AgentJob]:
    """The jobs that run branches of ``parallel`` on workers: ``(sub-agent, its call, queue)``.

    The calls are those of one dispatch event. Each branch sees the history up to that event
    (the session's last event when dispatched; an older one when a recovering orchestrator
    dispatches again) that belongs to its branch, never a sibling's. The history and the
    state snapshot are serialised once for all the branches.
    """
    ids = {call.id for _, call, _ in branches}
    history: list[tuple[str | None, dict[str, Any]]] = []
    for event in session.events:
        history.append((event.branch, event.to_wire()))
        if any(c.id in ids for c in event.get_function_calls()):
            break
    state = json_snapshot(session.state)
    content = user_content.model_dump(mode="json", exclude_none=True) if user_content else None
    jobs = []
    for sub, call, queue in branches:
        branch = str((call.args or {})["branch"])
        jobs.append(AgentJob(
            app_name=session.app_name,
            user_id=session.user_id,
            session_id=session.id,
            invocation_id=invocation_id,
            function_call_id=call.id or "",
            parallel_agent=parallel.name,
            agent_name=sub.name,
            branch=branch,
            state=state,
            events=[wire for seen, wire in history if belongs_to_branch(seen, branch)],
            user_content=content,
            queue=queue,
        ))
    return jobs


async def _collect(
    agent: BaseAgent, ctx: InvocationContext, dispatch: Event
) -> AsyncGenerator[Event, None]:
    events = [e for e in ctx.session.events if e.invocation_id == ctx.invocation_id]
    answers = {
        r.id: r for e in events for r in e.get_function_responses() if r.id
    }
    ledger = CallLedger.of(events, ctx.invocation_id)
    # A call confirmed since its branch paused is open, but its job goes out only when the
    # branch goes on here (its step sends it and pauses again; sending it twice is a no-op).
    still_open = [entry for entry in ledger.open_calls() if ledger.approved(entry.id) is None]
    for call in dispatch.get_function_calls():
        # A failed branch fails the agent at once, as in process: its siblings are not
        # waited for (nor continued).
        error = (getattr(answers.get(call.id or ""), "response", None) or {}).get("error")
        if error:
            raise RemoteBranchError(f"Branch {(call.args or {}).get('branch')} failed: {error}")
    waiting = False
    for call in dispatch.get_function_calls():
        args = call.args or {}
        if call.id in answers:
            continue
        sub = next((s for s in agent.sub_agents if s.name == args.get("agent")), None)
        if sub is None:
            raise ValueError(
                f"Cannot resume {agent.name!r}: branch agent {args.get('agent')!r} is not one "
                "of its sub-agents any more."
            )
        branch = str(args.get("branch"))
        if not any(on_or_below(e.branch, branch) for e in events) or any(
            on_or_below(entry.event.branch, branch) for entry in still_open
        ):
            waiting = True  # still running on a worker, or waiting for an answer
            continue
        # The branch paused on its worker and has its answers now: continue it here.
        paused = False
        async for event in sub.run_async(ctx.model_copy(update={"branch": branch})):
            paused = paused or ctx.should_pause_invocation(event)
            yield event
        if paused or ctx.is_paused(sub.name):
            waiting = True
            continue
        yield Event(
            invocation_id=ctx.invocation_id,
            author=agent.name,
            branch=ctx.branch,
            content=types.Content(role="user", parts=[types.Part(
                function_response=types.FunctionResponse(
                    id=call.id, name=RUN_BRANCH, response={"status": "completed"}
                )
            )]),
        )
    if waiting:
        ctx.mark_paused(agent.name)
        return
    ctx.set_agent_state(agent.name, end_of_agent=True)
    yield agent._create_agent_state_event(ctx)
