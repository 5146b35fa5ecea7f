"""A ParallelAgent whose branches run on workers (distributed mode, resumable apps).

The agent commits one dispatch event: a call ``adk_celery_run_branch`` per branch, all of
them long-running, and the invocation pauses. Each branch's events come back on its branch,
followed by the answer to its call. When the agent runs again (the invocation resumes) it
checks its calls: a branch that paused on a worker and whose own pending calls have since
been answered is continued here; once every call is answered, the agent ends as in process.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from google.genai import types

from orchestrator import platform
from orchestrator.agents.parallel_agent import branch_for
from orchestrator.distributed.models import AgentJob
from orchestrator.events.event import Event
from orchestrator.flows.contents import RUN_BRANCH, belongs_to_branch
from orchestrator.flows.remote_calls import json_snapshot

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.agents.invocation_context import InvocationContext


class RemoteBranchError(RuntimeError):
    """A branch failed on its worker; the invocation fails as it would in process."""


def _dispatch_event(ctx: InvocationContext, agent: BaseAgent) -> Event | None:
    for event in ctx.session.events:
        if (
            event.invocation_id == ctx.invocation_id
            and event.author == agent.name
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
        ctx.set_agent_state(agent.name, agent_state={})
        yield agent._create_agent_state_event(ctx)
    subs = [s for s in agent.sub_agents if not ctx.end_of_agents.get(s.name)]
    calls = [
        types.FunctionCall(
            id=platform.new_function_call_id(), name=RUN_BRANCH,
            args={"agent": sub.name, "branch": branch_for(ctx, agent, sub)},
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
    history = [e.to_wire() for e in ctx.session.events]
    state = json_snapshot(ctx.session.state)
    user_content = (
        ctx.user_content.model_dump(mode="json", exclude_none=True) if ctx.user_content else None
    )
    for sub, call in zip(subs, calls, strict=True):
        branch = str((call.args or {})["branch"])
        await ctx.transport.submit_agent(AgentJob(
            app_name=ctx.app_name,
            user_id=ctx.user_id,
            session_id=ctx.session.id,
            invocation_id=ctx.invocation_id,
            function_call_id=call.id or "",
            parallel_agent=agent.name,
            agent_name=sub.name,
            branch=branch,
            state=state,
            events=[e for e in history if belongs_to_branch(e.get("branch"), branch)],
            user_content=user_content,
            queue=ctx.transport.route_agent(sub) or queue,
        ))
    ctx.mark_paused(agent.name)


async def _collect(
    agent: BaseAgent, ctx: InvocationContext, dispatch: Event
) -> AsyncGenerator[Event, None]:
    events = [e for e in ctx.session.events if e.invocation_id == ctx.invocation_id]
    answers = {
        r.id: r for e in events for r in e.get_function_responses() if r.id
    }
    waiting = False
    for call in dispatch.get_function_calls():
        args = call.args or {}
        answer = answers.get(call.id or "")
        if answer is not None:
            error = (answer.response or {}).get("error")
            if error:
                raise RemoteBranchError(f"Branch {args.get('branch')} failed: {error}")
            continue
        sub = next((s for s in agent.sub_agents if s.name == args.get("agent")), None)
        if sub is None:
            raise ValueError(
                f"Cannot resume {agent.name!r}: branch agent {args.get('agent')!r} is not one "
                "of its sub-agents any more."
            )
        branch = str(args.get("branch"))
        on_branch = [e for e in events if e.branch and (
            e.branch == branch or e.branch.startswith(branch + "."))]
        if not on_branch or _open_calls(on_branch, answers):
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


def _open_calls(events: list[Event], answers: dict[str, types.FunctionResponse]) -> set[str]:
    ids: set[str] = set()
    for event in events:
        ids |= event.long_running_tool_ids or set()
    return {i for i in ids if i not in answers}
