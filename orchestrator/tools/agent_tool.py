"""AgentTool: lets a model call another agent as if it were a function."""

from __future__ import annotations

import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from google.genai import types
from pydantic import BaseModel

from orchestrator.agents.base_agent import BaseAgent
from orchestrator.agents.context import ToolContext
from orchestrator.agents.run_config import RunConfig, StreamingMode
from orchestrator.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService
from orchestrator.errors import unmark_reported
from orchestrator.flows.output_schema import structured_output
from orchestrator.memory.in_memory_memory_service import InMemoryMemoryService
from orchestrator.sessions.in_memory_session_service import InMemorySessionService
from orchestrator.tools.base_tool import BaseTool

if TYPE_CHECKING:
    from orchestrator.events.event import Event

logger = logging.getLogger(__name__)

GROUNDING_METADATA_KEY = "temp:_adk_grounding_metadata"
"""Where a tool with ``propagate_grounding_metadata`` leaves its grounding for the caller's
next model response (google-adk's key)."""


class AgentTool(BaseTool):
    """Runs an agent in a child session seeded from the caller's state; its reply is the result.

    State changes made by the child are applied to the caller's state (and so appear in the
    function-response event's delta); the child session itself is discarded, and the child's
    runner closed (its toolsets with it) after every call.
    """

    def __init__(
        self,
        agent: BaseAgent,
        skip_summarization: bool = False,
        *,
        include_plugins: bool = True,
        propagate_grounding_metadata: bool = False,
    ) -> None:
        super().__init__(name=agent.name, description=agent.description)
        self.agent = agent
        """The agent to run."""
        self.skip_summarization = skip_summarization
        """If true, the caller's model is not called again after the result."""
        self.include_plugins = include_plugins
        """If true, the child run has the caller's plugins (they stay the caller's to close)."""
        self.propagate_grounding_metadata = propagate_grounding_metadata
        """If true, the child's last grounding metadata goes on the caller's next model
        response (through the ``temp:`` state key :data:`GROUNDING_METADATA_KEY`)."""

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        """Declare ``request: string``, or the ``input_schema`` of the agent (or its first leaf)."""
        schema = input_schema_of(self.agent)
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
        message = _request_message(self.agent, args)
        caller = tool_context._invocation_context
        # The child runs as part of the caller's app (its tools and callbacks see the
        # caller's app name), in a session of its own.
        app_name = caller.app_name or self.agent.name
        plugins = list(caller.plugin_manager.plugins) if self.include_plugins else []
        runner = Runner(
            app=App.model_construct(name=app_name, root_agent=self.agent, plugins=plugins),
            session_service=InMemorySessionService(),
            memory_service=InMemoryMemoryService(),
            artifact_service=_ParentSessionArtifacts(tool_context),
        )
        runner.plugin_manager.set_skip_closing_plugins(True)
        state = {k: v for k, v in tool_context.state.to_dict().items() if not k.startswith("_adk")}
        session = await runner.session_service.create_session(
            app_name=app_name, user_id=tool_context.user_id, state=state
        )
        run_config = tool_context.run_config.model_copy(
            update={"streaming_mode": StreamingMode.NONE}
        ) if tool_context.run_config else RunConfig()
        child = _ChildRun()
        try:
            async with contextlib.aclosing(runner.run_async(
                user_id=session.user_id, session_id=session.id, run_config=run_config,
                new_message=message,
            )) as events:
                async for event in events:
                    if event.actions.state_delta:
                        tool_context.state.update(event.actions.state_delta)
                    child.see(event)
        except Exception as error:
            # The child's error event is in the child's own session: the calling agent
            # commits its own in the caller's (as google-adk's runtime does).
            unmark_reported(error)
            raise
        finally:
            # Closes the child's toolsets (an MCP session, say) once per call.
            await runner.close()
        if child.pending:
            # The child cannot be resumed (its session is gone): the caller's model must
            # hear of it, even from a tool that skips the summary.
            tool_context.actions.skip_summarization = False
            logger.warning(
                "Agent %r, called as a tool, stopped waiting on long-running call(s) %s; an "
                "AgentTool cannot resume it (its session is discarded): make it a sub-agent "
                "if it must wait for answers.", self.agent.name, sorted(child.pending),
            )
            return (
                f"Error: agent {self.agent.name!r} stopped waiting on unresolved long-running "
                f"tool call(s) (pending call ids: {sorted(child.pending)}), which AgentTool "
                "cannot resume."
            )
        result = self._result(child)
        if self.propagate_grounding_metadata and child.grounding_metadata:
            # As JSON: a tool's state writes travel from a worker as JSON.
            tool_context.state[GROUNDING_METADATA_KEY] = child.grounding_metadata.model_dump(
                mode="json", exclude_none=True
            )
        return result

    def _result(self, child: _ChildRun) -> Any:
        """The child's last answer: its text, parsed by the output schema if there is one."""
        if child.last is None or child.last.parts is None:
            return child.error_message or ""
        text = "\n".join(
            t for t in (_part_text(p) for p in child.last.parts if not p.thought) if t
        )
        if not text and child.error_message:
            return child.error_message
        schema = output_schema_of(self.agent)
        return structured_output(schema, text) if schema is not None else text


class _ChildRun:
    """What the caller keeps of the child's events."""

    def __init__(self) -> None:
        self.last: types.Content | None = None
        """The content of the child's last event with content."""
        self.grounding_metadata: types.GroundingMetadata | None = None
        """That event's grounding metadata."""
        self.error_message: str | None = None
        """The last error message an event carried (a model's refusal, say)."""
        self.pending: set[str] = set()
        """Long-running calls not answered by the end of the run."""

    def see(self, event: Event) -> None:
        """Take note of one event of the child's run."""
        if event.error_message:
            self.error_message = event.error_message
        if event.long_running_tool_ids:
            self.pending |= event.long_running_tool_ids
        if event.content is not None:
            self.last = event.content
            self.grounding_metadata = event.grounding_metadata
            # A long-running tool that answers at once is answered in the same run.
            self.pending -= {r.id for r in event.get_function_responses() if r.id}


def input_schema_of(agent: BaseAgent) -> type[BaseModel] | None:
    """The input schema of an LlmAgent, or of a composite agent's first sub-agent (in depth)."""
    from orchestrator.agents.llm_agent import LlmAgent

    if isinstance(agent, LlmAgent):
        return agent.input_schema
    return input_schema_of(agent.sub_agents[0]) if agent.sub_agents else None


def output_schema_of(agent: BaseAgent) -> Any:
    """The output schema of an LlmAgent, or of a composite agent's last sub-agent (in depth)."""
    from orchestrator.agents.llm_agent import LlmAgent

    if isinstance(agent, LlmAgent):
        return agent.output_schema
    return output_schema_of(agent.sub_agents[-1]) if agent.sub_agents else None


def _request_message(agent: BaseAgent, args: dict[str, Any]) -> types.Content:
    """The user message the child is sent for the model's ``args``."""
    schema = input_schema_of(agent)
    if schema is not None:
        text = schema.model_validate(args).model_dump_json(exclude_none=True)
    elif "request" in args:
        # Taken as it is: a request that is not a string fails here, as in google-adk.
        text = args["request"]
    else:
        # The model named its arguments otherwise: the child gets them all.
        text = json.dumps(args, ensure_ascii=False, sort_keys=True)
    return types.Content(role="user", parts=[types.Part(text=text)])


def _part_text(part: types.Part) -> str:
    """What a part of the child's answer says: its text, or the code it ran, or its output."""
    if part.text:
        return part.text
    if part.code_execution_result and part.code_execution_result.output:
        return part.code_execution_result.output.rstrip("\n")
    if part.executable_code and part.executable_code.code:
        return part.executable_code.code
    return ""


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
