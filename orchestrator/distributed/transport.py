"""The seam between the ADK core and whatever runs remote work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.distributed.models import AgentJob, ToolJob
    from orchestrator.tools.base_tool import BaseTool

QUEUE_METADATA_KEY = "adk_celery_queue"
"""``tool.custom_metadata[QUEUE_METADATA_KEY]`` routes a tool to a named worker queue."""
TIMEOUT_METADATA_KEY = "adk_celery_timeout"
"""``tool.custom_metadata[TIMEOUT_METADATA_KEY]``: seconds a remote call of the tool may take,
from its first dispatch, before it is answered with a timeout error."""
MAX_ATTEMPTS_METADATA_KEY = "adk_celery_max_attempts"
"""``tool.custom_metadata[MAX_ATTEMPTS_METADATA_KEY]``: how many times a lost job of the tool
is dispatched before its call is answered with an error."""


def call_policy(tool: BaseTool) -> dict[str, float | int | None]:
    """The tool's own deadline and attempts (``None``: the settings' defaults)."""
    metadata = tool.custom_metadata or {}
    timeout, attempts = metadata.get(TIMEOUT_METADATA_KEY), metadata.get(MAX_ATTEMPTS_METADATA_KEY)
    return {"timeout_seconds": float(timeout) if timeout is not None else None,
            "max_attempts": int(attempts) if attempts is not None else None}


class Transport(Protocol):
    """Decides which tools run remotely, and submits their jobs."""

    def route(self, tool: BaseTool) -> str | None:
        """The queue a call of ``tool`` goes to, or None to run it in the orchestrator."""
        ...

    async def submit(self, job: ToolJob) -> None:
        """Hand the job to a worker. Called only after the call event was committed.

        Once per call: submitting a call whose job already went out (same invocation, call
        id and attempt) does nothing, so whoever recovers an invocation can submit its open
        calls without knowing whether they went out.
        """
        ...

    def route_agent(self, agent: BaseAgent) -> str | None:
        """The queue for branch jobs of ``agent`` (a ParallelAgent, or one of its branches).

        None for a ParallelAgent keeps its branches in process.
        """
        ...

    async def submit_agent(self, job: AgentJob) -> None:
        """Hand a parallel branch to a worker (after the dispatch event was committed).

        Once per call, as :meth:`submit`.
        """
        ...


def default_route(
    tool: BaseTool, *, default_queue: str, tool_queues: dict[str, str]
) -> str | None:
    """Long-running tools, tools named in ``tool_queues`` and tools with queue metadata go remote."""
    if tool.name in tool_queues:
        return tool_queues[tool.name]
    metadata_queue = (tool.custom_metadata or {}).get(QUEUE_METADATA_KEY)
    if metadata_queue:
        return str(metadata_queue)
    if tool.is_long_running:
        return default_queue
    return None
