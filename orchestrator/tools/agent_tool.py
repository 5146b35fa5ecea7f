"""AgentTool: lets a model call another agent as if it were a function."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator.agents.base_agent import BaseAgent
from orchestrator.agents.context import ToolContext
from orchestrator.agents.run_config import RunConfig, StreamingMode
from orchestrator.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService
from orchestrator.errors import unmark_reported
from orchestrator.memory.in_memory_memory_service import InMemoryMemoryService
from orchestrator.sessions.in_memory_session_service import InMemorySessionService
from orchestrator.tools.base_tool import BaseTool

if TYPE_CHECKING:
    from orchestrator.events.event import Event

CANNOT_RESUME_ERROR = (
    "The agent {name} paused on a long-running call, and an AgentTool cannot resume: "
    "run it as a sub-agent instead to wait for the answer."
)


class AgentTool(BaseTool):
    """Runs an agent in a child session seeded from the caller's state; its reply is the result.

    State changes made by the child are applied to the caller's state (and so appear in the
    function-response event's delta); the child session itself is discarded.
    """

    def __init__(
        self, agent: BaseAgent, skip_summarization: bool = False, *, include_plugins: bool = True
    ) -> None:
        super().__init__(name=agent.name, description=agent.description)
        self.agent = agent
        """The agent to run."""
        self.skip_summarization = skip_summarization
        """If true, the caller's model is not called again after the result."""
        self.include_plugins = include_plugins
        """If true, the child run has the caller's plugins (they stay the caller's to close)."""

    def _input_schema(self) -> Any:
        return getattr(self.agent, "input_schema", None)

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        """Declare ``request: string``, or the agent's ``input_schema``."""
        schema = self._input_schema()
        parameters = schema.model_json_schema() if schema is not None else {
            "type": "object",
            "properties": {"request": {"type": "string"}},
            "required": ["request"],
        }
        return types.FunctionDeclaration(
            name=self.name, description=self.description, parameters_json_schema=parameters
        )

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """Run the agent to completion and return its final text (or parsed output)."""
        from orchestrator.apps.app import App
        from orchestrator.runners import Runner

        if self.skip_summarization:
            tool_context.actions.skip_summarization = True
        schema = self._input_schema()
        text = (
            schema.model_validate(args).model_dump_json(exclude_none=True)
            if schema is not None else str(args.get("request", ""))
        )
        plugins = (
            list(tool_context._invocation_context.plugin_manager.plugins)
            if self.include_plugins else []
        )
        runner = Runner(
            app=App.model_construct(name=self.agent.name, root_agent=self.agent, plugins=plugins),
            session_service=InMemorySessionService(),
            memory_service=InMemoryMemoryService(),
            artifact_service=_ParentSessionArtifacts(tool_context),
        )
        runner.plugin_manager.set_skip_closing_plugins(True)
        state = {k: v for k, v in tool_context.state.to_dict().items() if not k.startswith("_adk")}
        session = await runner.session_service.create_session(
            app_name=self.agent.name, user_id=tool_context.user_id, state=state
        )
        run_config = tool_context.run_config.model_copy(
            update={"streaming_mode": StreamingMode.NONE}
        ) if tool_context.run_config else RunConfig()
        last: Event | None = None
        paused = False
        try:
            async for event in runner.run_async(
                user_id=session.user_id, session_id=session.id, run_config=run_config,
                new_message=types.Content(role="user", parts=[types.Part(text=text)]),
            ):
                if event.actions.state_delta:
                    tool_context.state.update(event.actions.state_delta)
                if event.long_running_tool_ids:
                    paused = True
                if event.content is not None:
                    last = event
        except Exception as error:
            # The child's error event is in the child's own session: the calling agent
            # commits its own in the caller's (as google-adk's runtime does).
            unmark_reported(error)
            raise
        if paused and (last is None or last.long_running_tool_ids):
            return CANNOT_RESUME_ERROR.format(name=self.agent.name)
        return self._result(last)

    def _result(self, last: Event | None) -> Any:
        if last is None or last.content is None or not last.content.parts:
            return ""
        text = "\n".join(p.text for p in last.content.parts if p.text and not p.thought)
        schema = getattr(self.agent, "output_schema", None)
        if schema is not None and text:
            return schema.model_validate_json(text).model_dump(exclude_none=True)
        return text


class _ParentSessionArtifacts(BaseArtifactService):
    """Artifact access from the child run goes to the caller's session."""

    def __init__(self, tool_context: ToolContext) -> None:
        self._ctx = tool_context

    def _service(self) -> BaseArtifactService:
        service = self._ctx._invocation_context.artifact_service
        if service is None:
            raise ValueError("Artifact service is not initialized.")
        return service

    def _scope(self) -> dict[str, Any]:
        return {
            "app_name": self._ctx.app_name,
            "user_id": self._ctx.user_id,
            "session_id": self._ctx.session.id,
        }

    async def save_artifact(self, *, filename: str, artifact: Any, custom_metadata: Any = None,
                            **_: Any) -> int:
        """Save in the caller's session and record the version in its artifact_delta."""
        return await self._ctx.save_artifact(filename, artifact, custom_metadata)

    async def load_artifact(self, *, filename: str, version: int | None = None,
                            **_: Any) -> types.Part | None:
        """Load from the caller's session."""
        return await self._ctx.load_artifact(filename, version)

    async def list_artifact_keys(self, **_: Any) -> list[str]:
        """List the caller's artifacts."""
        return await self._ctx.list_artifacts()

    async def delete_artifact(self, *, filename: str, **_: Any) -> None:
        """Delete from the caller's session."""
        await self._service().delete_artifact(filename=filename, **self._scope())

    async def list_versions(self, *, filename: str, **_: Any) -> list[int]:
        """Versions in the caller's session."""
        return await self._service().list_versions(filename=filename, **self._scope())

    async def list_artifact_versions(self, *, filename: str, **_: Any) -> list[ArtifactVersion]:
        """Version metadata in the caller's session."""
        return await self._service().list_artifact_versions(filename=filename, **self._scope())

    async def get_artifact_version(self, *, filename: str, version: int | None = None,
                                   **_: Any) -> ArtifactVersion | None:
        """One version's metadata in the caller's session."""
        return await self._service().get_artifact_version(
            filename=filename, version=version, **self._scope()
        )
