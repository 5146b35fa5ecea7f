"""The seam between the ADK core and whatever runs remote work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.distributed.models import AgentJob, ToolJob
    from orchestrator.tools.base_tool import BaseTool

QUEUE_METADATA_KEY = "adk_celery_queue"
"""``tool.custom_metadata[QUEUE_METADATA_KEY]`` routes a tool to a named worker queue."""


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
