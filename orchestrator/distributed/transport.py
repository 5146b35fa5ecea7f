"""The seam between the ADK core and whatever runs remote work."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.distributed.models import AgentJob, ToolJob
    from orchestrator.events.event import Event
    from orchestrator.tools.base_tool import BaseTool

QUEUE_METADATA_KEY = "adk_celery_queue"
"""``tool.custom_metadata[QUEUE_METADATA_KEY]`` routes a tool to a named worker queue."""
TIMEOUT_METADATA_KEY = "adk_celery_timeout"
"""``tool.custom_metadata[TIMEOUT_METADATA_KEY]``: seconds a remote call of the tool may take,
from its first dispatch, before it is answered with a timeout error (a call inside a
ParallelAgent branch's job on a worker: from its start)."""
MAX_ATTEMPTS_METADATA_KEY = "adk_celery_max_attempts"
"""``tool.custom_metadata[MAX_ATTEMPTS_METADATA_KEY]``: how many times a lost job of the tool
is dispatched before its call is answered with an error."""


def call_policy(tool: BaseTool) -> dict[str, float | int | None]:
    """The tool's own deadline and attempts (``None``: the settings' defaults)."""
    metadata = tool.custom_metadata or {}
    timeout, attempts = metadata.get(TIMEOUT_METADATA_KEY), metadata.get(MAX_ATTEMPTS_METADATA_KEY)
    return {"timeout_seconds": float(timeout) if timeout is not None else None,
            "max_attempts": int(attempts) if attempts is not None else None}


def effective_timeout(own: float | None, default: float) -> float | None:
    """A call's deadline in seconds: the tool's own, else ``default``; None for none.

    ``default`` is the setting ``tool_timeout_seconds``; neither above 0: no deadline.
    """
    seconds = own or default
    return seconds if seconds > 0 else None


def timeout_error(tool_name: str, seconds: float) -> str:
    """The error a call past its deadline is answered with (the model reads it)."""
    return f"Tool {tool_name!r} timed out: no answer within {seconds:g} s."


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

    def prepare_with_commit(self, job: ToolJob) -> Any | None:
        """What sends ``job`` from inside the commit of its call event, or None.

        A back-end's own operands (the Redis back-end's ``JobPublish``), for a session writer
        of the same back-end to send in the script that stores the event; None where this
        transport cannot, and the job is submitted after the commit instead.
        """
        ...


def tool_queue(transport: Transport | None, tool: BaseTool) -> str | None:
    """The queue a call of ``tool`` goes to through ``transport``; None: it runs here.

    ``set_model_response`` always runs here, whatever the transport's routing (a
    ``tool_queues`` entry of that name, say): the flow makes its answer the agent's final
    event in the same step, and a worker does not have the tool.
    """
    from orchestrator.tools.set_model_response_tool import SetModelResponseTool

    if transport is None or isinstance(tool, SetModelResponseTool):
        return None
    return transport.route(tool)


class CommitDispatch:
    """Jobs of a call event's remote calls, to be sent by the commit that stores the event.

    The flow attaches one to a call event (:func:`attach_commit_dispatch`) when its transport
    can publish from inside a commit. A session writer that can send them asks for them with
    the session state the event leaves (:meth:`publishes`), sends them in the same script as
    the event, and records their call ids in :attr:`published`; the flow then submits only
    the others. A writer that cannot ignores it, and every call is submitted as usual.
    """

    def __init__(self, build: Callable[[dict[str, Any]], list[tuple[str, Any]]]) -> None:
        self._build = build
        self.published: set[str] = set()
        """Ids of the calls whose jobs went out with the event."""

    def publishes(self, state: dict[str, Any]) -> list[tuple[str, Any]]:
        """``(call id, back-end operands)`` of each job, given the state after the event."""
        return self._build(state)


def attach_commit_dispatch(event: Event, dispatch: CommitDispatch) -> None:
    """Have the commit of ``event`` send ``dispatch``'s jobs (kept on copies of the event)."""
    event._commit_dispatch = dispatch


def commit_dispatch(event: Event) -> CommitDispatch | None:
    """The jobs to send with ``event``'s commit, if the flow attached any."""
    found = event._commit_dispatch
    return found if isinstance(found, CommitDispatch) else None


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
