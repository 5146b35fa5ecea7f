"""Submitting a tool call to a worker instead of running it in the orchestrator."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator import failpoints
from orchestrator.distributed.models import ToolJob
from orchestrator.distributed.transport import call_policy

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
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
) -> ToolJob:
    """The job that runs ``call`` on a worker, with a snapshot of what the tool may read.

    ``tool``: the tool called, whose metadata may set the call's deadline and attempts.
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
        state=json_snapshot(session.state),
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
