"""BaseAgent: the agent template (callbacks around ``_run_async_impl``) and agent state."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from google.genai import types
from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.agents import callbacks as cb
from orchestrator.agents.context import CallbackContext
from orchestrator.events.event import Event
from orchestrator.events.event_actions import EventActions

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext

logger = logging.getLogger(__name__)

StateT = TypeVar("StateT", bound="BaseAgentState")
AgentT = TypeVar("AgentT", bound="BaseAgent")


class BaseAgentState(BaseModel):
    """Checkpoint of an agent in a resumable invocation; subclasses add fields."""

    model_config = ConfigDict(extra="forbid")


class BaseAgent(BaseModel):
    """An agent: subclasses implement ``_run_async_impl`` and yield events."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    name: str
    """A Python identifier, unique in the agent tree; not ``user``."""
    description: str = ""
    """What the agent does; shown to other agents deciding on transfers."""
    parent_agent: BaseAgent | None = Field(default=None, init=False, repr=False, exclude=True)
    """Set automatically when the agent is made a sub-agent."""
    sub_agents: list[BaseAgent] = Field(default_factory=list)
    """Child agents."""
    before_agent_callback: Any = None
    """``(callback_context) -> Content | None``, or a list; content skips the agent."""
    after_agent_callback: Any = None
    """``(callback_context) -> Content | None``, or a list; content adds an event."""

    @field_validator("name")
    @classmethod
    def _validate_name(cls, value: str) -> str:
        # The texts are google-adk 2.13's (its node check words the first one).
        if not value.isidentifier():
            raise ValueError(f"Node name {value!r} must be a valid Python identifier.")
        if value == "user":
            raise ValueError(
                "Agent name cannot be `user`. `user` is reserved for end-user's input."
            )
        return value

    @field_validator("sub_agents")
    @classmethod
    def _warn_duplicate_names(cls, value: list[BaseAgent]) -> list[BaseAgent]:
        # Names found in more than one sub-agent's subtree (within one subtree, the
        # sub-agent's own construction already warned).
        seen: set[str] = set()
        duplicates: set[str] = set()
        for sub in value:
            names = _subtree_names(sub)
            duplicates |= seen & names
            seen |= names
        _warn_duplicates(duplicates)
        return value

    def model_post_init(self, __context: Any) -> None:
        """Adopt sub-agents (an agent can have only one parent)."""
        # This agent's own name below it once (twice or more was reported above).
        if sum(self.name in _subtree_names(sub) for sub in self.sub_agents) == 1:
            _warn_duplicates({self.name})
        # Any parent already set refuses the agent, this one too: the same agent listed
        # twice in one ``sub_agents`` is refused, as google-adk 2.13 refuses it.
        for sub in self.sub_agents:
            if sub.parent_agent is not None:
                raise ValueError(
                    f"Agent `{sub.name}` already has a parent agent, current parent: "
                    f"`{sub.parent_agent.name}`, trying to add: `{self.name}`"
                )
            sub.parent_agent = self

    # Agents form a graph with parent links: compare and hash by identity.
    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    @property
    def root_agent(self) -> BaseAgent:
        """The root of this agent's tree."""
        agent = self
        while agent.parent_agent is not None:
            agent = agent.parent_agent
        return agent

    def find_agent(self, name: str) -> BaseAgent | None:
        """Find this agent or a descendant by name (depth-first)."""
        if self.name == name:
            return self
        return self.find_sub_agent(name)

    def find_sub_agent(self, name: str) -> BaseAgent | None:
        """Find a descendant by name (depth-first)."""
        for sub in self.sub_agents:
            found = sub.find_agent(name)
            if found is not None:
                return found
        return None

    def clone(self: AgentT, update: Mapping[str, Any] | None = None) -> AgentT:
        """A copy of this agent (and, unless ``update`` gives new ones, of its sub-agents).

        ``update`` sets fields of the copy (not ``parent_agent``: a parent adopts its
        sub-agents). List fields are copied, so appending to the copy's ``tools`` leaves this
        agent alone; a callback that is a method of this agent is rebound to the copy. The
        copy has no parent.
        """
        fields = type(self).model_fields
        if update is not None:
            # The texts are google-adk 2.13's.
            if "parent_agent" in update:
                raise ValueError(
                    "Cannot update `parent_agent` field in clone. Parent agent is set only "
                    "when the parent agent is instantiated with the sub-agents."
                )
            unknown = set(update) - set(fields)
            if unknown:
                raise ValueError(
                    f"Cannot update nonexistent fields in {type(self).__name__}: {unknown}"
                )
        copy = self.model_copy(update=dict(update) if update is not None else None)

        def rebind(value: Any) -> Any:
            # A bound method of this agent would keep acting on this agent, not the copy.
            if inspect.ismethod(value) and value.__self__ is self:
                return value.__func__.__get__(copy)
            return value

        for name in fields:
            if name == "sub_agents" or (update is not None and name in update):
                continue
            value = getattr(copy, name)
            if isinstance(value, list):
                setattr(copy, name, [rebind(item) for item in value])
            elif inspect.ismethod(value):
                setattr(copy, name, rebind(value))
        if update is None or "sub_agents" not in update:
            copy.sub_agents = [sub.clone() for sub in self.sub_agents]
        for sub in copy.sub_agents:
            sub.parent_agent = copy
        copy.parent_agent = None
        return copy

    async def run_async(self, parent_context: InvocationContext) -> AsyncGenerator[Event, None]:
        """Run the agent: before-callbacks, ``_run_async_impl``, after-callbacks."""
        ctx = parent_context.model_copy(update={"agent": self})
        try:
            async for event in self._run_with_callbacks(ctx):
                yield event
        except Exception as error:
            await self._tell_agent_error(ctx, error)
            raise

    async def _tell_agent_error(self, ctx: InvocationContext, error: Exception) -> None:
        """Tell the plugins that ``error`` leaves this agent (once per agent it leaves)."""
        if not ctx.plugin_manager.plugins:
            return
        told: set[str] = getattr(error, "_adk_celery_agents_told", set())
        if self.name in told:
            return
        error._adk_celery_agents_told = told | {self.name}  # type: ignore[attr-defined]
        await ctx.plugin_manager.run_on_agent_error_callback(
            agent=self, callback_context=CallbackContext(ctx), error=error
        )

    async def _error_event(self, ctx: InvocationContext, error: Exception) -> Event | None:
        """The event committed for ``error`` as it leaves this agent's run, if any.

        None here; an LlmAgent commits one (see ``LlmAgent._error_event``).
        """
        return None

    async def _run_with_callbacks(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        # A run taken up after a wait for workers started before it, with its callbacks.
        if not ctx.take_resumed(self.name):
            try:
                event = await self._handle_agent_callback(
                    ctx, self.before_agent_callback, before=True)
            except Exception as error:
                if (reported := await self._error_event(ctx, error)) is not None:
                    yield reported
                raise
            if event is not None:
                yield event
        if ctx.end_invocation:
            return
        async for event in self._run_async_impl(ctx):
            yield event
        if ctx.end_invocation:
            return
        # Its transfer was a hop: its run ended there, without after-callbacks (google-adk
        # 2.13 under a root LlmAgent); the Runner runs the target next.
        if ctx.hopped(self):
            return
        # Stopped to wait for workers, it is not over: the run that continues it ends it.
        if (self.after_agent_callback or ctx.plugin_manager.plugins) and \
                ctx.waits_for_workers(self.name):
            return
        try:
            event = await self.end_run(ctx)
        except Exception as error:
            if (reported := await self._error_event(ctx, error)) is not None:
                yield reported
            raise
        if event is not None:
            yield event

    async def end_run(self, ctx: InvocationContext) -> Event | None:
        """Run the after-agent callbacks (the plugins', then the agent's); return their event.

        adk-celery: also called by a Runner that ends the run of an agent it took up without
        re-entering it (see ``orchestrator.agents.agent_runs``).
        """
        return await self._handle_agent_callback(ctx, self.after_agent_callback, before=False)

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        """The agent body: yield events. Each is committed before the generator resumes."""
        raise NotImplementedError(f"{type(self).__name__} must implement _run_async_impl")
        yield  # pragma: no cover

    async def _handle_agent_callback(
        self, ctx: InvocationContext, callbacks: Any, *, before: bool
    ) -> Event | None:
        plugins = ctx.plugin_manager
        if not callbacks and not plugins.plugins:
            return None
        callback_context = CallbackContext(ctx)
        # Plugins first; content from one of them skips the agent's own callbacks.
        hook = plugins.run_before_agent_callback if before else plugins.run_after_agent_callback
        content = await hook(agent=self, callback_context=callback_context)
        if not content and callbacks:
            content = await cb.run_until(
                callbacks, {"callback_context": callback_context}, stop=cb.is_truthy
            )
        actions = callback_context.actions
        if content:
            if before:
                ctx.end_invocation = True
            return self._event(ctx, content=_as_content(content), actions=actions)
        if actions.state_delta or actions.artifact_delta:
            return self._event(ctx, actions=actions)
        return None

    def _event(
        self,
        ctx: InvocationContext,
        *,
        content: types.Content | None = None,
        actions: EventActions | None = None,
    ) -> Event:
        return Event(
            invocation_id=ctx.invocation_id,
            author=self.name,
            branch=ctx.branch,
            content=content,
            actions=actions or EventActions(),
        )

    def _load_agent_state(self, ctx: InvocationContext, state_type: type[StateT]) -> StateT | None:
        """Return this agent's checkpoint from a resumed invocation, if any."""
        data = ctx.agent_states.get(self.name)
        if data is None:
            return None
        return state_type.model_validate(data)

    def _create_agent_state_event(self, ctx: InvocationContext) -> Event:
        """Return a content-less event recording this agent's checkpoint or end."""
        actions = EventActions()
        if (state := ctx.agent_states.get(self.name)) is not None:
            actions.agent_state = state
        if ctx.end_of_agents.get(self.name):
            actions.end_of_agent = True
        return self._event(ctx, actions=actions)


def _subtree_names(agent: BaseAgent) -> set[str]:
    names: set[str] = set()
    stack, visited = [agent], set()
    while stack:
        current = stack.pop()
        if id(current) in visited:
            continue
        visited.add(id(current))
        names.add(current.name)
        stack.extend(current.sub_agents)
    return names


def _warn_duplicates(names: set[str]) -> None:
    """Report agent names used more than once in a tree: lookups by name find only one."""
    if names:
        logger.warning(
            "Agent names must be unique in an agent tree; used more than once: %s. "
            "Looking an agent up by name (find_agent, transfers, resuming) finds the first "
            "one, depth-first.",
            ", ".join(f"`{name}`" for name in sorted(names)),
        )


def _as_content(value: Any) -> types.Content:
    if isinstance(value, types.Content):
        return value
    if isinstance(value, str):
        return types.Content(role="model", parts=[types.Part(text=value)])
    return types.Content.model_validate(value)
