"""Submitting a tool call to a worker instead of running it in the orchestrator."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator import failpoints
from orchestrator.distributed.models import ToolJob
from orchestrator.distributed.transport import (
    CommitDispatch,
    attach_commit_dispatch,
    call_policy,
    tool_queue,
)

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.events.event import Event
    from orchestrator.sessions.session import Session
    from orchestrator.tools.base_tool import BaseTool
    from orchestrator.tools.tool_confirmation import ToolConfirmation


def json_snapshot(value: Any) -> Any:
    """A JSON-safe deep copy (values JSON cannot hold become strings, as ADK does)."""
    return json.loads(json.dumps(value, default=str))


def tool_job(
    session: Session,
    invocation_id: str,
    agent_name: str,
    branch: str | None,
    call: types.FunctionCall,
    queue: str,
    user_content: types.Content | None,
    confirmation: ToolConfirmation | None = None,
    tool: BaseTool | None = None,
    state: dict[str, Any] | None = None,
) -> ToolJob:
    """The job that runs ``call`` on a worker, with a snapshot of what the tool may read.

    ``tool``: the tool called, whose metadata may set the call's deadline and attempts.
    ``state``: the state the tool reads (the session's when omitted).
    """
    return ToolJob(
        app_name=session.app_name,
        user_id=session.user_id,
        session_id=session.id,
        invocation_id=invocation_id,
        function_call_id=call.id or "",
        tool_name=call.name or "",
        agent_name=agent_name,
        branch=branch,
        args=json_snapshot(call.args or {}),
        state=json_snapshot(session.state if state is None else state),
        user_content=(
            user_content.model_dump(mode="json", exclude_none=True)
            if user_content is not None else None
        ),
        tool_confirmation=(
            confirmation.model_dump(mode="json") if confirmation is not None else None
        ),
        queue=queue,
        **(call_policy(tool) if tool is not None else {}),
    )


async def dispatch_remote_call(
    ctx: InvocationContext,
    agent_name: str,
    call: types.FunctionCall,
    queue: str,
    confirmation: ToolConfirmation | None,
    tool: BaseTool | None = None,
) -> None:
    """Build the job for ``call`` and submit it through the context's transport."""
    assert ctx.transport is not None and call.id
    failpoints.hit("dispatch.before_publish")
    await ctx.transport.submit(tool_job(
        ctx.session, ctx.invocation_id, agent_name, ctx.branch, call, queue, ctx.user_content,
        confirmation, tool,
    ))
    failpoints.hit("dispatch.after_publish")


def attach_remote_jobs(ctx: InvocationContext, event: Event, tools: dict[str, BaseTool]) -> None:
    """Have the commit of ``event`` send the jobs of its remote calls, where it can.

    Only where the transport can publish from inside a commit, and for calls of tools that
    never require a confirmation (a rule may be user code reading the call's context: it runs
    after the call event is committed, as in google-adk). The jobs are built at commit time,
    from the state the event leaves, exactly as :func:`dispatch_remote_call` would build them
    after it.
    """
    transport = ctx.transport
    if transport is None or not event.long_running_tool_ids:
        return
    calls = []
    for call in event.get_function_calls():
        tool = tools.get(call.name or "")
        if call.id in event.long_running_tool_ids and tool is not None and \
                tool.never_requires_confirmation() and (queue := tool_queue(transport, tool)):
            calls.append((call, queue, tool))
    if not calls:
        return
    session, invocation_id, agent_name = ctx.session, ctx.invocation_id, ctx.agent.name
    branch, user_content = ctx.branch, ctx.user_content

    def build(state: dict[str, Any]) -> list[tuple[str, Any]]:
        jobs = []
        for call, queue, tool in calls:
            job = tool_job(session, invocation_id, agent_name, branch, call, queue,
                           user_content, None, tool, state)
            if (operands := transport.prepare_with_commit(job)) is not None:
                jobs.append((job.function_call_id, operands))
        return jobs

    attach_commit_dispatch(event, CommitDispatch(build))
