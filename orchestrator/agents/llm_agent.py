"""LlmAgent (alias Agent): an agent driven by a model, tools and instructions."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Union

from google.genai import types
from pydantic import BaseModel, Field, field_validator, model_validator

from orchestrator.agents.base_agent import BaseAgent
from orchestrator.agents.context import ReadonlyContext
from orchestrator.agents.llm_agent_checks import (
    check_default_model,
    check_generate_content_config,
    check_misplaced_arguments,
    check_tools,
)
from orchestrator.agents.llm_agent_tools import resolve_tool_unions
from orchestrator.agents.output_key import accumulate_output, save_final_output
from orchestrator.errors import (
    InvocationCancelledError,
    ToolExitError,
    error_name,
    is_infrastructure_error,
    mark_reported,
)
from orchestrator.events.event import Event, call_author
from orchestrator.models.base_llm import BaseLlm
from orchestrator.models.registry import LLMRegistry
from orchestrator.tools.base_tool import BaseTool
from orchestrator.tools.base_toolset import BaseToolset

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext

InstructionProvider = Callable[[ReadonlyContext], Union[str, Awaitable[str]]]
ToolUnion = Union[Callable[..., Any], BaseTool, BaseToolset]

logger = logging.getLogger(__name__)


class LlmAgent(BaseAgent):
    """An agent that calls a model in a loop, running the tools it asks for."""

    DEFAULT_MODEL: ClassVar[str] = "gemini-3.5-flash"
    """The model of agents that name none (google-adk 2.13's default)."""
    _default_model: ClassVar[str | BaseLlm | None] = None
    """``set_default_model``'s choice, if made; it comes before ``DEFAULT_MODEL``."""

    model: Union[str, BaseLlm] = ""
    """A model name (resolved by the registry) or a BaseLlm; empty inherits from ancestors."""
    instruction: Union[str, InstructionProvider] = ""
    """System instruction; strings are templated with session state."""
    global_instruction: Union[str, InstructionProvider] = ""
    """Instruction for the whole tree (root agent only; deprecated in ADK)."""
    static_instruction: Any = None
    """Sent verbatim as the system instruction before ``instruction``."""
    tools: list[Any] = Field(default_factory=list)
    """Functions, BaseTools or BaseToolsets."""
    generate_content_config: types.GenerateContentConfig | None = None
    """Generation settings; must not set tools, system_instruction or response_schema."""
    disallow_transfer_to_parent: bool = False
    """Forbid transferring back to the parent agent."""
    disallow_transfer_to_peers: bool = False
    """Forbid transferring to sibling agents."""
    include_contents: Literal["default", "none"] = "default"
    """``none`` sends only the current turn."""
    input_schema: type[BaseModel] | None = None
    """Schema of the input when used as a tool."""
    output_schema: type[BaseModel] | None = None
    """Schema the final answer must match (JSON)."""
    output_key: str | None = None
    """State key where the final answer text (or parsed object) is saved."""
    planner: Any = None
    """Accepted for compatibility; not used."""
    code_executor: Any = None
    """Accepted for compatibility; not used."""
    before_model_callback: Any = None
    """``(callback_context, llm_request) -> LlmResponse | None``; a response skips the model."""
    after_model_callback: Any = None
    """``(callback_context, llm_response) -> LlmResponse | None``; a response replaces it."""
    on_model_error_callback: Any = None
    """``(callback_context, llm_request, error) -> LlmResponse | None``."""
    before_tool_callback: Any = None
    """``(tool, args, tool_context) -> dict | None``; a dict skips the tool."""
    after_tool_callback: Any = None
    """``(tool, args, tool_context, tool_response) -> dict | None``; replaces the result."""
    on_tool_error_callback: Any = None
    """``(tool, args, tool_context, error) -> dict | None``; a dict recovers."""

    @classmethod
    def set_default_model(cls, model: str | BaseLlm) -> None:
        """Set the model (a name or a BaseLlm) used by agents that name none."""
        check_default_model(model)
        # DEFAULT_MODEL stays google-adk's constant; the override is kept beside it.
        cls._default_model = model

    @model_validator(mode="before")
    @classmethod
    def _check_arguments(cls, data: Any) -> Any:
        fields = set(cls.model_fields) | {
            f.alias for f in cls.model_fields.values() if f.alias is not None}
        return check_misplaced_arguments(data, fields)

    @field_validator("generate_content_config")
    @classmethod
    def _validate_config(
        cls, config: types.GenerateContentConfig | None
    ) -> types.GenerateContentConfig:
        return check_generate_content_config(config)

    @field_validator("tools")
    @classmethod
    def _validate_tools(cls, tools: list[Any]) -> list[Any]:
        return check_tools(tools)

    @property
    def canonical_model(self) -> BaseLlm:
        """The model instance: this agent's, the nearest ancestor's, or the default."""
        agent: BaseAgent | None = self
        while agent is not None:
            model = getattr(agent, "model", "")
            if isinstance(model, BaseLlm):
                return model
            if model:
                return _cached_llm(model)
            agent = agent.parent_agent
        default = type(self)._default_model or self.DEFAULT_MODEL
        return default if isinstance(default, BaseLlm) else _cached_llm(default)

    async def canonical_instruction(self, ctx: ReadonlyContext) -> tuple[str, bool]:
        """Return (instruction, bypass_templating): providers bypass state injection."""
        return await _resolve_instruction(self.instruction, ctx)

    async def canonical_global_instruction(self, ctx: ReadonlyContext) -> tuple[str, bool]:
        """Return (global instruction, bypass_templating)."""
        return await _resolve_instruction(self.global_instruction, ctx)

    async def canonical_tools(self, ctx: ReadonlyContext | None = None) -> list[BaseTool]:
        """Resolve functions into FunctionTools and toolsets into their current tools.

        Toolsets are asked concurrently (``get_tools_with_prefix``); one that fails is left
        out, with an error log naming it, and the agent runs without its tools (as in
        google-adk). A ``google_search`` built with ``bypass_multi_tools_limit=True`` next to
        other tools (or transfer targets) becomes a search agent called as a tool.
        """
        return [tool for _, tools in await self.resolve_tool_unions(ctx) for tool in tools]

    async def resolve_tool_unions(
        self, ctx: ReadonlyContext | None = None
    ) -> list[tuple[Any, list[BaseTool]]]:
        """Each entry of ``tools`` with the BaseTools it stands for now, in order."""
        return await resolve_tool_unions(self, ctx)

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        from orchestrator.flows.llm_flow import LlmFlow

        if ctx.transfers_by_hop(self) and (target := self._hop_not_taken(ctx)) is not None:
            # Taken up after its transfer was committed and before the target ran (its
            # run stopped there): the hop ends this run as it would have then. The answer
            # handed in with it (its transfer) is acted on here: taken, so that no later
            # turn of this agent in this run acts on it again.
            ctx.take_answers_in(self.name, ctx.branch)
            ctx.hop_to(target)
            async for event in self._end_hopped_run(ctx):
                yield event
            return
        paused = False
        resumed = self._sub_agent_to_resume(ctx) if ctx.is_resumable else None
        if resumed is not None and ctx.end_of_agents.get(resumed.name):
            # Its transfer's target ended (and its after-callbacks, owed or not, are run
            # before this): a stop before this agent's end. Its model is not called again.
            events: AsyncGenerator[Event, None] = _no_events()
        elif resumed is not None:
            events = resumed.run_async(ctx)
        else:
            events = LlmFlow().run_async(ctx)
        # The turn's text so far, for ``output_key`` (not when continuing a sub-agent's turn).
        output: str | None = "" if resumed is None else None
        try:
            async for event in events:
                save_final_output(self, event)
                if output is not None:
                    output = accumulate_output(self, event, output)
                paused = paused or ctx.should_pause_invocation(event)
                yield event
        except Exception as error:
            if (reported := await self._error_event(ctx, error)) is not None:
                yield reported
            raise
        if ctx.hopped(self):
            async for event in self._end_hopped_run(ctx):
                yield event
        elif paused or ctx.is_paused(self.name) or (
                resumed is not None and ctx.is_paused(resumed.name)):
            ctx.mark_paused(self.name)
        elif ctx.is_resumable:
            ctx.set_agent_state(self.name, end_of_agent=True)
            yield self._create_agent_state_event(ctx)

    async def _error_event(self, ctx: InvocationContext, error: Exception) -> Event | None:
        """The error event committed (as google-adk 2.x does) before ``error`` leaves the run.

        Whether the model, a tool or one of this agent's callbacks raised it.
        None for an infrastructure error (Redis, a lost lease: not the agent's; the work is
        retried, so nothing of it may reach the log), a cancel, or an error whose event an
        agent it passed through committed already.
        """
        if is_infrastructure_error(error) or isinstance(error, InvocationCancelledError) \
                or not mark_reported(error):
            return None
        # Plugins hear of the error before its event, as in ADK (where the runtime around
        # the agent commits that event).
        await self._tell_agent_error(ctx, error)
        return Event(
            invocation_id=ctx.invocation_id,
            author=self.name,
            branch=ctx.branch,
            error_code=error_name(error),
            error_message=str(error.error if isinstance(error, ToolExitError) else error),
        )

    async def _end_hopped_run(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        """End a run that a transfer hop ended: in a resumable app, with ``end_of_agent``.

        google-adk 2.13 commits it right after the transfer, before the target's events.
        """
        if ctx.is_resumable:
            ctx.set_agent_state(self.name, end_of_agent=True)
            yield self._create_agent_state_event(ctx)

    def _hop_not_taken(self, ctx: InvocationContext) -> BaseAgent | None:
        """The target of this agent's transfer if it is the last thing the log holds.

        The run that committed it stopped before acting on it (its orchestrator stopped,
        or the transfer came with a remote call's answer); this agent's content-less events
        after it (its end) tell nothing new.
        """
        from orchestrator.flows.transfer import resolve_target

        # From the end of the log: read on every entry of a scheduled agent, so it stops at
        # the first event that is not this agent's content-less one (a scheduled agent runs
        # alone at the top of the invocation: nothing else is committed meanwhile).
        for event in reversed(ctx.session.events):
            if event.partial or (event.author == self.name and event.content is None):
                continue
            if event.invocation_id != ctx.invocation_id or event.author != self.name:
                return None
            target = event.actions.transfer_to_agent
            return resolve_target(self, target) if target else None
        return None

    def _sub_agent_to_resume(self, ctx: InvocationContext) -> BaseAgent | None:
        """On resume, the agent below this one whose call (or transfer) is being continued.

        Read from this branch's view of the log: in a ParallelAgent, the answer to a
        sibling branch's call is that sibling's to continue.
        """
        events = ctx.branch_view()
        # This agent's own events without content (its callbacks' state, its checkpoints)
        # tell nothing of where it stopped: its before-callbacks, run again as a long-running
        # call's answer resumes it, write one.
        while events and events[-1].author == self.name and events[-1].content is None:
            events = events[:-1]
        if not events:
            return None
        last = events[-1]
        owner: str | None = None
        if responses := last.get_function_responses():
            # A user's answer, or a worker's (committed in the calling agent's name).
            owner = call_author(events, responses[0].id)
        elif last.author == self.name and last.actions.transfer_to_agent:
            owner = last.actions.transfer_to_agent
        elif last.author != "user" and ctx.takes_up(last.author):
            owner = last.author  # recovering: the agent under way below this one goes on
        elif last.author != "user" and ctx.end_of_agents.get(last.author) and \
                not ctx.transfers_by_hop(self):
            # Recovering: the agent this one transferred to ran to its end inside this run
            # (not a hop: then it ended a run of its own); the caller sees it ended, and
            # this agent's turn is over.
            owner = last.author
        if not owner or owner == self.name:
            return None
        agent = self.root_agent.find_agent(owner)
        if agent is None or not _is_below(agent, self):
            return None  # e.g. the transfer that started this agent: not its to continue
        # Resume the outermost checkpointed workflow agent on the way down, so it continues
        # with its remaining sub-agents after this one.
        while (
            agent.parent_agent is not None
            and agent.parent_agent is not self
            and agent.parent_agent.name in ctx.agent_states
        ):
            agent = agent.parent_agent
        return agent

    async def _handle_agent_callback(
        self, ctx: InvocationContext, callbacks: Any, *, before: bool
    ) -> Event | None:
        event = await super()._handle_agent_callback(ctx, callbacks, before=before)
        if before and event is not None:
            # A before-agent callback that answers for the agent fills its output_key, as
            # the model's answer would (google-adk 2.13; an after-agent one's does not).
            save_final_output(self, event)
        return event

def _is_below(agent: BaseAgent, ancestor: BaseAgent) -> bool:
    """True if ``ancestor`` is a parent of ``agent``, or a parent's parent, and so on."""
    parent = agent.parent_agent
    while parent is not None:
        if parent is ancestor:
            return True
        parent = parent.parent_agent
    return False


Agent = LlmAgent

_llm_cache: dict[str, BaseLlm] = {}


def _cached_llm(name: str) -> BaseLlm:
    llm = _llm_cache.get(name)
    if llm is None:
        llm = _llm_cache[name] = LLMRegistry.new_llm(name)
    return llm


async def _resolve_instruction(
    instruction: Union[str, InstructionProvider], ctx: ReadonlyContext
) -> tuple[str, bool]:
    if isinstance(instruction, str):
        return instruction, False
    result = instruction(ctx)
    if isinstance(result, Awaitable):
        result = await result
    if not isinstance(result, str):  # refused, as google-adk does: it is no instruction
        raise TypeError(
            f"An instruction provider must return a str; it returned {type(result).__name__}.")
    return result, True


async def _no_events() -> AsyncGenerator[Event, None]:
    """An agent step with nothing left to do."""
    return
    yield  # pragma: no cover
