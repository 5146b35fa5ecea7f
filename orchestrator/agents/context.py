"""Contexts handed to callbacks and tools: a read-only view and the writable Context.

As in ADK 2.x, ``CallbackContext`` and ``ToolContext`` are the same class, ``Context``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator.artifacts.save_ids import CALL_SAVE_ID, call_save_id
from orchestrator.events.event_actions import EventActions
from orchestrator.sessions.state import State
from orchestrator.tools.tool_confirmation import ToolConfirmation

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.run_config import RunConfig
    from orchestrator.artifacts.base_artifact_service import ArtifactVersion
    from orchestrator.events.event import Event
    from orchestrator.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
    from orchestrator.memory.memory_entry import MemoryEntry
    from orchestrator.sessions.session import Session


class ReadonlyContext:
    """Read-only view of the running invocation."""

    def __init__(self, invocation_context: InvocationContext) -> None:
        self._invocation_context = invocation_context

    @property
    def invocation_id(self) -> str:
        """The current invocation id."""
        return self._invocation_context.invocation_id

    @property
    def agent_name(self) -> str:
        """The name of the running agent."""
        return self._invocation_context.agent.name

    @property
    def user_content(self) -> types.Content | None:
        """The user message that started the invocation."""
        return self._invocation_context.user_content

    @property
    def state(self) -> Mapping[str, Any]:
        """The session state, read-only."""
        return MappingProxyType(self._invocation_context.session.state)

    @property
    def session(self) -> Session:
        """The current session."""
        return self._invocation_context.session

    @property
    def user_id(self) -> str:
        """The current user id."""
        return self._invocation_context.user_id

    @property
    def app_name(self) -> str:
        """The current app name."""
        return self._invocation_context.app_name

    @property
    def run_config(self) -> RunConfig:
        """The run's RunConfig."""
        return self._invocation_context.run_config

    @property
    def branch(self) -> str | None:
        """The running agent's branch."""
        return self._invocation_context.branch

    @property
    def is_aborted(self) -> bool:
        """True once the caller aborted the run."""
        return self._invocation_context.is_aborted


class Context(ReadonlyContext):
    """Writable context for callbacks and tools: state writes are recorded in ``actions``."""

    def __init__(
        self,
        invocation_context: InvocationContext,
        *,
        event_actions: EventActions | None = None,
        function_call_id: str | None = None,
        tool_confirmation: ToolConfirmation | None = None,
    ) -> None:
        super().__init__(invocation_context)
        self._event_actions = event_actions if event_actions is not None else EventActions()
        self._state = State(invocation_context.session.state, self._event_actions.state_delta)
        self.function_call_id = function_call_id
        """The id of the function call being executed (tools only)."""
        self.tool_confirmation = tool_confirmation
        """The confirmation answer, when a confirmed tool is re-run."""
        self._saves: dict[str, int] = {}
        """Saves of each file made through this context (see :meth:`save_artifact`)."""
        self.attempt = 1
        """adk-celery: which run of this call this is (more than 1 when a worker was lost and
        the call's job was dispatched again, with the same ``function_call_id``)."""

    @property
    def state(self) -> State:  # type: ignore[override]
        """Session state; writes are visible at once and recorded in ``actions.state_delta``."""
        return self._state

    @property
    def actions(self) -> EventActions:
        """The actions of the event this context writes into.

        Writes made into a dict or list read from :attr:`state` are recorded in its
        ``state_delta`` first (as google-adk's context does).
        """
        self._state.record_nested_writes()
        return self._event_actions

    def _artifact_service(self) -> Any:
        service = self._invocation_context.artifact_service
        if service is None:
            raise ValueError("Artifact service is not initialized.")
        return service

    async def save_artifact(
        self,
        filename: str,
        artifact: types.Part,
        custom_metadata: dict[str, Any] | None = None,
    ) -> int:
        """Save an artifact in this session; record its version in ``artifact_delta``.

        adk-celery: a tool's save names itself by its call (see
        :mod:`orchestrator.artifacts.save_ids`): a second run of the call (its worker lost,
        its orchestrator stopped) gets the version the first run saved, not a new one.
        """
        token = None
        if self.function_call_id:
            nth = self._saves.get(filename, 0)
            self._saves[filename] = nth + 1
            token = CALL_SAVE_ID.set(call_save_id(
                self.invocation_id, self.function_call_id, filename, nth))
        try:
            version: int = await self._artifact_service().save_artifact(
                app_name=self.app_name,
                user_id=self.user_id,
                session_id=self.session.id,
                filename=filename,
                artifact=artifact,
                custom_metadata=custom_metadata,
            )
        finally:
            if token is not None:
                CALL_SAVE_ID.reset(token)
        self._event_actions.artifact_delta[filename] = version
        return version

    async def load_artifact(self, filename: str, version: int | None = None) -> types.Part | None:
        """Load an artifact of this session (latest version by default)."""
        part: types.Part | None = await self._artifact_service().load_artifact(
            app_name=self.app_name,
            user_id=self.user_id,
            session_id=self.session.id,
            filename=filename,
            version=version,
        )
        return part

    async def list_artifacts(self) -> list[str]:
        """List artifact names visible to this session."""
        keys: list[str] = await self._artifact_service().list_artifact_keys(
            app_name=self.app_name, user_id=self.user_id, session_id=self.session.id
        )
        return keys

    async def get_artifact_version(
        self, filename: str, version: int | None = None
    ) -> ArtifactVersion | None:
        """Return an artifact version's metadata."""
        result: ArtifactVersion | None = await self._artifact_service().get_artifact_version(
            app_name=self.app_name,
            user_id=self.user_id,
            session_id=self.session.id,
            filename=filename,
            version=version,
        )
        return result

    def request_confirmation(self, *, hint: str | None = None, payload: Any = None) -> None:
        """Ask for a human confirmation of the current tool call."""
        if not self.function_call_id:
            raise ValueError("request_confirmation requires a function_call_id.")
        self._event_actions.requested_tool_confirmations[self.function_call_id] = (
            ToolConfirmation(hint=hint or "", payload=payload)
        )

    def report_progress(self, progress: dict[str, Any]) -> None:
        """Report progress of a long-running tool (shown in Flower when run on a worker)."""
        reporter = self._invocation_context.progress_reporter
        if reporter is not None:
            reporter(progress)

    def _memory_service(self, action: str) -> BaseMemoryService:
        service = self._invocation_context.memory_service
        if service is None:
            raise ValueError(f"Cannot {action}: this runner has no memory service.")
        return service

    async def search_memory(self, query: str) -> SearchMemoryResponse:
        """Search the memory service for this user."""
        result: SearchMemoryResponse = await self._memory_service("search memory").search_memory(
            app_name=self.app_name, user_id=self.user_id, query=query
        )
        return result

    async def add_session_to_memory(self) -> None:
        """Add the current session to the memory service."""
        await self._memory_service("add the session to memory").add_session_to_memory(
            self.session
        )

    async def add_events_to_memory(
        self,
        *,
        events: Sequence[Event],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Add these events (not the whole session) to memory, scoped to this session."""
        await self._memory_service("add events to memory").add_events_to_memory(
            app_name=self.app_name,
            user_id=self.user_id,
            session_id=self.session.id,
            events=events,
            custom_metadata=custom_metadata,
        )

    async def add_memory(
        self,
        *,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Write memory entries directly for this user (if the memory service supports it)."""
        await self._memory_service("add memory").add_memory(
            app_name=self.app_name,
            user_id=self.user_id,
            memories=memories,
            custom_metadata=custom_metadata,
        )

    async def delete_memory(self, memory_id: str | None = None) -> None:
        """Delete one of this user's memories by id (if the memory service supports it)."""
        await self._memory_service("delete memory").delete_memory(
            app_name=self.app_name, user_id=self.user_id, memory_id=memory_id
        )


CallbackContext = Context
ToolContext = Context
