"""Submitting a tool call to a worker instead of running it in the orchestrator."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator.distributed.models import ToolJob

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.tools.tool_confirmation import ToolConfirmation


def json_snapshot(value: Any) -> Any:
    """A JSON-safe deep copy (values JSON cannot hold become strings, as ADK does)."""
    return json.loads(json.dumps(value, default=str))


async def dispatch_remote_call(
    ctx: InvocationContext,
    agent_name: str,
    call: types.FunctionCall,
    queue: str,
    confirmation: ToolConfirmation | None,
) -> None:
    """Build the job for ``call`` and submit it through the context's transport."""
    assert ctx.transport is not None and call.id
    job = ToolJob(
        app_name=ctx.app_name,
        user_id=ctx.user_id,
        session_id=ctx.session.id,
        invocation_id=ctx.invocation_id,
        function_call_id=call.id,
        tool_name=call.name or "",
        agent_name=agent_name,
        branch=ctx.branch,
        args=json_snapshot(call.args or {}),
        state=json_snapshot(ctx.session.state),
        user_content=(
            ctx.user_content.model_dump(mode="json", exclude_none=True)
            if ctx.user_content is not None else None
        ),
        tool_confirmation=(
            confirmation.model_dump(mode="json") if confirmation is not None else None
        ),
        queue=queue,
    )
    await ctx.transport.submit(job)
