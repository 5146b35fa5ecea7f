"""JSON payloads that cross process boundaries: jobs, results, invocation records, work items."""

from __future__ import annotations

import enum
import uuid
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from orchestrator import platform


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolJob(_Wire):
    """One tool call to run on a worker, with a read-only snapshot of what it may read."""

    app_name: str
    user_id: str
    session_id: str
    invocation_id: str
    function_call_id: str
    """With ``invocation_id``, the job's idempotency key."""
    tool_name: str
    agent_name: str
    """The agent that issued the call (its tools are the only ones the worker will run)."""
    branch: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)
    """Snapshot of the session state when the call was made."""
    user_content: dict[str, Any] | None = None
    tool_confirmation: dict[str, Any] | None = None
    """The confirmation answer, when a confirmed call is run."""
    queue: str = ""
    attempt: int = 1
    """1 for the first dispatch of the call; more when a lost job was dispatched again."""
    timeout_seconds: float | None = None
    """The tool's own deadline, from the first dispatch (None: the settings' default)."""
    max_attempts: int | None = None
    """The tool's own number of attempts (None: the settings' default)."""
    deadline: float | None = None
    """Not set any more, nor read: a call's deadline is kept in the job journal, by Redis's
    clock. Accepted so that a job an older orchestrator sent still runs."""


class AgentJob(_Wire):
    """One branch of a ParallelAgent to run on a worker, with the history it may see."""

    app_name: str
    user_id: str
    session_id: str
    invocation_id: str
    function_call_id: str
    """The dispatch call this branch answers."""
    parallel_agent: str
    """The ParallelAgent that dispatched the branch."""
    agent_name: str
    """The sub-agent to run (a direct sub-agent of ``parallel_agent``)."""
    branch: str
    state: dict[str, Any] = Field(default_factory=dict)
    """Snapshot of the session state at dispatch."""
    events: list[dict[str, Any]] = Field(default_factory=list)
    """The session events visible to the branch at dispatch (Event wire JSON)."""
    user_content: dict[str, Any] | None = None
    queue: str = ""
    attempt: int = 1
    """1 for the first dispatch of the branch; more when a lost job was dispatched again."""


class ToolResult(_Wire):
    """A finished call: the response, or None when it waits for an answer from outside."""

    function_call_id: str
    tool_name: str
    response: dict[str, Any] | None = None
    """The FunctionResponse payload; None = still pending (a falsy long-running result)."""
    state_delta: dict[str, Any] = Field(default_factory=dict)
    state_before: dict[str, Any] | None = None
    """What the job's state snapshot held of each key of ``state_delta`` (a key left out: it
    held none); None: not known (a client's answer, an older worker). With it, calls of one
    model turn that change one container all keep their changes (see
    :func:`~orchestrator.distributed.state_merge.merge_state_writes`)."""
    artifact_delta: dict[str, int] = Field(default_factory=dict)
    actions: dict[str, Any] = Field(default_factory=dict)
    """The tool's other ``EventActions`` that are set (``skip_summarization``,
    ``transfer_to_agent``, ``escalate``...), as JSON: the answer event carries them as the
    tool's answer in process does."""
    error: str | None = None
    """Set when the tool raised: ``"<ExceptionType>: <message>"``."""
    error_callbacks_ran: bool = False
    """True when the error left the worker's tool callback chain (the tool's exception was
    offered to the on_tool_error callbacks, none recovered it; or a callback raised): the
    orchestrator does not offer it to them again. False for errors made outside a tool run
    (a deadline, a lost job, an oversized result), which the orchestrator offers."""
    source: Literal["worker", "client"] = "worker"
    """Who answered: a worker, or a client (a human approval, another service)."""
    worker: str | None = None
    """``hostname:pid`` of the worker that ran the tool."""
    events: list[dict[str, Any]] = Field(default_factory=list)
    """For a parallel branch: the events it produced (Event wire JSON), committed in order."""
    created_at: float = Field(default_factory=platform.get_time)

    @property
    def answered(self) -> bool:
        """False for a pending placeholder (no response, no branch events): still waiting."""
        return self.response is not None or bool(self.events)


class InvocationStatus(str, enum.Enum):
    """Lifecycle of an enqueued invocation.

    The sets of statuses the project speaks of are defined here only: :attr:`FINISHED`,
    :attr:`SETTLED` and :attr:`LIVE` (iterate the enum and filter when the order matters: a
    frozenset's order changes from one process to the next).
    """

    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    # Annotated, not assigned: a value here would become a member. Set below the class.
    FINISHED: ClassVar[frozenset[InvocationStatus]]
    """Completed, failed, cancelled: the invocation never runs again (a follow always stops)."""
    SETTLED: ClassVar[frozenset[InvocationStatus]]
    """Finished or paused: nothing happens until someone answers (the default ``until``)."""
    LIVE: ClassVar[frozenset[InvocationStatus]]
    """Queued, running, paused: not finished (the statuses the Redis index keeps)."""

    @property
    def is_finished(self) -> bool:
        """True for a status in :attr:`FINISHED`."""
        return self in InvocationStatus.FINISHED


InvocationStatus.FINISHED = frozenset(
    {InvocationStatus.COMPLETED, InvocationStatus.FAILED, InvocationStatus.CANCELLED})
InvocationStatus.SETTLED = InvocationStatus.FINISHED | {InvocationStatus.PAUSED}
InvocationStatus.LIVE = frozenset(InvocationStatus) - InvocationStatus.FINISHED


class InvocationRecord(BaseModel):
    """The durable record of an enqueued invocation."""

    # Our own storage, read by clients of any version: a field a newer orchestrator added is
    # ignored, not refused (a rolling upgrade must not break status or wait).
    model_config = ConfigDict(extra="ignore")

    invocation_id: str
    app_name: str
    user_id: str
    session_id: str
    status: InvocationStatus = InvocationStatus.QUEUED
    error: str | None = None
    """Why the invocation failed (type and message)."""
    new_message: dict[str, Any] | None = None
    """The user's message (genai Content JSON)."""
    state_delta: dict[str, Any] | None = None
    streaming: bool = False
    """Run with SSE streaming, so partial chunks reach the live event stream."""
    custom_metadata: dict[str, Any] | None = None
    """``RunConfig.custom_metadata`` of the run: merged into every event of the invocation."""
    pending_calls: list[str] = Field(default_factory=list)
    """Function-call ids the paused invocation waits for."""
    pending_tools: dict[str, str] = Field(default_factory=dict)
    """The tool (or ``adk_celery_run_branch``) each pending call called, by call id."""
    inside_calls: list[str] = Field(default_factory=list)
    """Pending calls only what runs them may answer (a branch, a plain tool on a worker):
    refused from outside (see :mod:`orchestrator.distributed.outside_answers`)."""
    created_at: float = Field(default_factory=platform.get_time)
    updated_at: float = Field(default_factory=platform.get_time)


class WorkItem(_Wire):
    """One entry of a session's work queue: start, resume or cancel an invocation.

    ``session_deleted``: the invocation's session was deleted; it ends failed
    (SessionNotFoundError), as it can never go on.
    """

    kind: Literal["start", "resume", "cancel", "session_deleted"]
    invocation_id: str
    item_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    """Tells apart two items alike (two resumes of one invocation): a queue that drops a
    finished item by its JSON drops that one, never its twin queued behind it."""
    _stored: str | None = PrivateAttr(default=None)

    @classmethod
    def from_stored(cls, raw: str) -> WorkItem:
        """The item as a queue stored it (``raw``: its JSON), kept to find it there again."""
        item = cls.model_validate_json(raw)
        item._stored = raw
        return item

    def stored_json(self) -> str:
        """The JSON this item is stored as (what it was read from, else its own)."""
        return self._stored if self._stored is not None else self.model_dump_json()


class PendingCall(BaseModel):
    """Where one call a paused invocation waits for stands (see ``Client.calls``)."""

    function_call_id: str
    name: str
    """The tool called (``adk_celery_run_branch`` for a ParallelAgent branch)."""
    where: Literal["queued", "running", "retrying", "waiting for an answer", "answered"]
    """``queued``: its job waits for a worker; ``running``: on ``worker``; ``retrying``: a lost
    job was dispatched again (``attempt``) and waits for a worker; ``waiting for an answer``:
    no job runs, the answer comes from outside (``Client.answer``); ``answered``: its answer
    is in, and the invocation goes on once the calls it waits for with it are answered."""
    attempt: int | None = None
    worker: str | None = None
    """``hostname:pid`` of the worker running it."""
    last_seen: float | None = None
    """When that worker last said the job was alive (epoch seconds)."""
    progress: dict[str, Any] | None = None
    """What the tool last reported with ``report_progress`` (this attempt's, if it ran)."""
    progress_at: float | None = None
    """When it reported it (epoch seconds, the worker's clock)."""
