"""Running one ToolJob: the body every transport executes, on a worker or in process."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from google.genai import types

from orchestrator.agents.context import ToolContext
from orchestrator.agents.invocation_context import InvocationContext
from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.artifacts.base_artifact_service import BaseArtifactService
from orchestrator.distributed.models import ToolJob, ToolResult
from orchestrator.distributed.registry import AppRegistry
from orchestrator.sessions.session import Session
from orchestrator.tools.tool_confirmation import ToolConfirmation

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


def _error(job: ToolJob, message: str) -> ToolResult:
    return ToolResult(
        function_call_id=job.function_call_id, tool_name=job.tool_name,
        response={"error": message}, error=message, worker=WORKER_ID,
    )


async def execute_tool_job(
    job: ToolJob,
    registry: AppRegistry,
    *,
    artifact_service: BaseArtifactService | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> ToolResult:
    """Run the job's tool with a ToolContext over a state snapshot; never raises.

    Only tools registered on the issuing agent of a registered app can run. State writes are
    returned as a delta; a falsy result of a long-running tool leaves the call pending.
    """
    try:
        app = registry.get(job.app_name)
    except LookupError as error:
        return _error(job, str(error))
    agent = app.root_agent.find_agent(job.agent_name)
    if not isinstance(agent, LlmAgent):
        return _error(job, f"Agent {job.agent_name!r} is not an LlmAgent of app {job.app_name!r}.")
    tools = {tool.name: tool for tool in await agent.canonical_tools(None)}
    tool = tools.get(job.tool_name)
    if tool is None:
        return _error(
            job,
            f"Tool {job.tool_name!r} is not registered on agent {job.agent_name!r} of app "
            f"{job.app_name!r}; workers run only registered tools.",
        )
    session = Session(
        id=job.session_id, app_name=job.app_name, user_id=job.user_id, state=dict(job.state)
    )
    ctx = InvocationContext(
        session_service=None,  # type: ignore[arg-type]  (workers never write sessions)
        invocation_id=job.invocation_id,
        agent=agent,
        session=session,
        artifact_service=artifact_service,
        branch=job.branch,
        user_content=types.Content.model_validate(job.user_content) if job.user_content else None,
        progress_reporter=progress,
    )
    confirmation = (
        ToolConfirmation.model_validate(job.tool_confirmation) if job.tool_confirmation else None
    )
    tool_context = ToolContext(
        ctx, function_call_id=job.function_call_id, tool_confirmation=confirmation
    )
    try:
        result = await tool.run_async(args=dict(job.args), tool_context=tool_context)
    except Exception as error:  # the model reads the failure as an error response
        return _error(job, f"{type(error).__name__}: {error}").model_copy(
            update={"state_delta": dict(tool_context.actions.state_delta)}
        )
    response: dict[str, Any] | None
    if tool.is_long_running and not result:
        response = None
    elif isinstance(result, dict):
        response = result
    else:
        response = {"result": result}
    return ToolResult(
        function_call_id=job.function_call_id,
        tool_name=job.tool_name,
        response=response,
        state_delta=dict(tool_context.actions.state_delta),
        artifact_delta=dict(tool_context.actions.artifact_delta),
        worker=WORKER_ID,
    )
