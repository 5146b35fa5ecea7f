"""Runner: the event loop. The agent yields an event, the Runner commits it, the agent goes on.

The Runner's public API lives here; its helpers, one role each, in the ``runner_*``
modules beside it: ``runner_params`` (the App from the arguments), ``runner_context`` (the
session and context a run works on), ``runner_loop`` (the loop itself: the agents a run
runs, each event committed), ``runner_messages`` (the user's event), ``runner_routing``
(the invocation, the agent and the branch a run lands on), ``runner_resume`` (continuing
and recovering an invocation), ``runner_ends`` (the ``after_agent`` ends a run owes),
``runner_plugins`` (the run callbacks), ``runner_threads`` (the sync ``run``),
``runner_rewind``, ``runner_debug``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Generator
from typing import Any

from google.genai import types

from orchestrator.agents.agent_ends import ends_owed
from orchestrator.agents.agent_runs import RunsGoingOn
from orchestrator.agents.base_agent import BaseAgent
from orchestrator.agents.invocation_context import InvocationContext
from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.agents.run_config import RunConfig
from orchestrator.apps.app import App
from orchestrator.artifacts.base_artifact_service import BaseArtifactService
from orchestrator.artifacts.in_memory_artifact_service import InMemoryArtifactService
from orchestrator.distributed.transport import Transport
from orchestrator.errors import InvocationNotFoundError
from orchestrator.events.event import Event
from orchestrator.memory.base_memory_service import BaseMemoryService
from orchestrator.memory.in_memory_memory_service import InMemoryMemoryService
from orchestrator.plugins.base_plugin import BasePlugin
from orchestrator.plugins.plugin_manager import PluginManager
from orchestrator.runner_context import load_session, new_context
from orchestrator.runner_loop import commit_run, run_agent
from orchestrator.runner_messages import commit_user_message, validate_new_message
from orchestrator.runner_params import validate_runner_params
from orchestrator.runner_plugins import no_events, process_event
from orchestrator.runner_resume import (
    calls_answered,
    check_recoverable,
    commit_answers_to_calls,
    last_answers,
    take_up_runs,
)
from orchestrator.runner_routing import (
    has_invocation,
    original_user_content,
    resolve_invocation_from_responses,
)
from orchestrator.runner_threads import iterate_in_thread
from orchestrator.sessions.base_session_service import BaseSessionService, SessionWriter
from orchestrator.sessions.in_memory_session_service import InMemorySessionService
from orchestrator.sessions.session import Session
from orchestrator.tools.base_toolset import BaseToolset

logger = logging.getLogger(__name__)


class Runner:
    """Runs an app's agents against a session service, committing every event it yields."""

    def __init__(
        self,
        *,
        app: App | None = None,
        app_name: str | None = None,
        agent: BaseAgent | None = None,
        plugins: list[BasePlugin] | None = None,
        artifact_service: BaseArtifactService | None = None,
        session_service: BaseSessionService,
        memory_service: BaseMemoryService | None = None,
        credential_service: Any = None,
        plugin_close_timeout: float = 5.0,
        auto_create_session: bool = False,
        transport: Transport | None = None,
    ) -> None:
        self.app, self.app_name = validate_runner_params(app, app_name, agent, plugins)
        self.plugin_manager = PluginManager(self.app.plugins, close_timeout=plugin_close_timeout)
        """The app's plugins; every context of this runner's runs shares it."""
        self.agent: BaseAgent = self.app.root_agent
        self.session_service = session_service
        self.artifact_service = artifact_service
        self.memory_service = memory_service
        self.credential_service = credential_service
        self.auto_create_session = auto_create_session
        self.transport = transport
        """Where remote tool calls go (adk-celery); None runs every tool in process."""

    @property
    def resumability_config(self) -> Any:
        """The app's ResumabilityConfig, if any."""
        return self.app.resumability_config

    async def run_async(
        self,
        *,
        user_id: str,
        session_id: str,
        invocation_id: str | None = None,
        new_message: types.Content | None = None,
        state_delta: dict[str, Any] | None = None,
        run_config: RunConfig | None = None,
        yield_user_message: bool = False,
        abort_signal: asyncio.Event | None = None,
        session: Session | None = None,
        session_writer: SessionWriter | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Run one invocation (or continue one); yield each event after it is committed.

        adk-celery additions: ``session``, the session as just read (spares reading it
        again), and ``session_writer``, what commits the events (the session service when
        omitted; an orchestrator passes the writer bound to its lease).
        """
        run_config = run_config or RunConfig()
        writer = session_writer or self.session_service
        if new_message is not None and new_message.role != "user":
            new_message = types.Content(role="user", parts=new_message.parts)
        if session is None:
            session = await load_session(self, user_id, session_id, run_config)
        validate_new_message(new_message)
        responses = [
            p.function_response for p in (new_message.parts or []) if p.function_response
        ] if new_message else []
        call_event = None
        if responses:
            invocation_id, call_event = resolve_invocation_from_responses(
                session, responses, invocation_id
            )
        resuming = bool(invocation_id) and has_invocation(session, invocation_id)
        on_history = not resuming and not responses and new_message is None
        if on_history and invocation_id and state_delta is None:
            raise InvocationNotFoundError(
                f"Invocation {invocation_id!r} not found in session {session_id!r}."
            )
        if on_history and not isinstance(self.agent, LlmAgent):
            # As google-adk: only a root LlmAgent runs on the history alone (a state change
            # alone too, and a distributed start of a given id that only changes state).
            raise ValueError(
                "Running an agent requires either a new_message or an invocation_id to resume "
                f"a previous invocation. Session: {session_id}, User: {user_id}")
        if resuming and not responses and not self._is_resumable:
            raise ValueError(
                f"Cannot resume invocation {invocation_id!r}: app {self.app_name!r} is not "
                "resumable. Configure App(resumability_config=ResumabilityConfig("
                "is_resumable=True)), or answer its pending calls with function responses."
            )
        ctx = new_context(self, session, invocation_id, new_message, run_config, abort_signal)
        if resuming:
            original = original_user_content(session, ctx.invocation_id)
            ctx.user_content = original or new_message
            if original is not None and new_message is not None and not responses:
                new_message = None  # the invocation already has its user message
        async with contextlib.aclosing(commit_run(
            ctx, session, writer,
            lambda: commit_user_message(
                ctx, new_message, state_delta, run_config, call_event, writer, yield_user_message
            ),
            lambda: run_agent(ctx, session, self.agent, writer, resuming=resuming,
                              resumable=self._is_resumable, call_event=call_event),
        )) as events:
            async for event in events:
                yield event

    async def continue_async(
        self,
        *,
        user_id: str,
        session_id: str,
        invocation_id: str,
        answers: list[Event],
        run_config: RunConfig | None = None,
        transport: Transport | None = None,
        session: Session | None = None,
        yield_answers: bool = False,
        session_writer: SessionWriter | None = None,
        recovering: bool = False,
    ) -> AsyncGenerator[Event, None]:
        """Commit answer events (function responses) to an invocation and continue it.

        Each answer must respond to open calls of ``invocation_id``; it is committed with that
        invocation id and the calling event's branch, then the agent that issued the calls
        goes on. This is how results computed elsewhere (workers, other services) come back.
        With ``yield_answers`` the committed answers are yielded first. ``recovering``: the
        run that was going on stopped mid-way (see :meth:`recover_async`); in a resumable
        app the agents under way in it are taken up, and after-callbacks it left owed run
        first.
        """
        run_config = run_config or RunConfig()
        writer = session_writer or self.session_service
        if session is None:  # callers that just loaded it pass it in
            session = await load_session(self, user_id, session_id, run_config)
        call_event, calling = calls_answered(session, invocation_id, answers)
        ctx = new_context(self, session, invocation_id, None, run_config, None)
        ctx.transport = transport or self.transport
        ctx.user_content = original_user_content(session, invocation_id)
        # A resumable app's log says where each agent under way stopped (a ParallelAgent's
        # branches in process too); another app's run goes on as a continued one, down the
        # one chain of transfers its answers are for.
        recovering = recovering and self._is_resumable
        self._take_up_runs(ctx, session, recovering=recovering)  # before the answers' commit
        owed: list[Event] = []
        if recovering:
            ctx.start_recovery()
            owed = ends_owed(self.agent, session.events, invocation_id)
        async with contextlib.aclosing(commit_run(
            ctx, session, writer,
            lambda: commit_answers_to_calls(
                ctx, session, writer, invocation_id, answers, calling, run_config, yield_answers
            ),
            lambda: run_agent(ctx, session, self.agent, writer, resuming=True,
                              resumable=self._is_resumable, call_event=call_event, owed=owed),
        )) as events:
            async for event in events:
                yield event

    async def recover_async(
        self,
        *,
        user_id: str,
        session_id: str,
        invocation_id: str,
        run_config: RunConfig | None = None,
        session: Session | None = None,
        session_writer: SessionWriter | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Continue an invocation from its committed log after its runner stopped mid-run.

        Resumable apps continue from their agents' checkpoints. Other apps can be continued
        when the agent that was running is an LlmAgent reached by transfers only: its step
        is rebuilt from the log (open calls pause it again, calls left unanswered run
        again). If its final answer is committed, no agent is re-entered: only the runs
        whose after-callbacks are not in the log after that answer end. A workflow agent
        without checkpoints cannot be continued: that raises, naming the setting that would.
        """
        run_config = run_config or RunConfig()
        if session is None:
            session = await load_session(self, user_id, session_id, run_config)
        if not has_invocation(session, invocation_id):
            raise InvocationNotFoundError(
                f"Invocation {invocation_id!r} not found in session {session_id!r}."
            )
        ctx = new_context(self, session, invocation_id, None, run_config, None)
        ctx.user_content = original_user_content(session, invocation_id)
        ctx.start_recovery()
        runs = self._take_up_runs(ctx, session, recovering=True)
        # Answers committed last, by a run that stopped before acting on them (a transfer,
        # no summary: see orchestrator.flows.answers_in), are acted on now.
        ctx.hand_answers_in(last_answers(session, invocation_id))
        check_recoverable(session, self.agent, invocation_id, self.app_name, self._is_resumable)
        writer = session_writer or self.session_service
        # Its final answer in, an agent's turn is over: calling its model again would answer
        # twice, running its after-callbacks again would apply their effect twice.
        answered = runs is not None and runs.answered
        # Resumable: an agent's end is committed before its after-callbacks run; those
        # the stopped run did not finish run first, as they would have (see ends_owed).
        owed = ends_owed(self.agent, session.events, invocation_id) if self._is_resumable else []
        async with contextlib.aclosing(commit_run(
            ctx, session, writer, no_events,
            lambda: run_agent(ctx, session, self.agent, writer, resuming=True,
                              resumable=self._is_resumable, call_event=None,
                              answered=answered, owed=owed),
        )) as events:
            async for event in events:
                yield event

    async def commit_events(
        self,
        *,
        session: Session,
        invocation_id: str,
        events: list[Event],
        session_writer: SessionWriter | None = None,
    ) -> list[Event]:
        """adk-celery: commit events made elsewhere, outside a run; return them as committed.

        For a parallel branch's events that come back from a worker while other branches
        are still out: each passes the plugins' ``on_event_callback`` first, as the events
        of a run do.
        """
        writer = session_writer or self.session_service
        ctx = new_context(self, session, invocation_id, None, RunConfig(), None)
        committed = []
        for event in events:
            event = await process_event(ctx, event)
            await writer.append_event(session, event)
            committed.append(event)
        return committed

    def _take_up_runs(
        self, ctx: InvocationContext, session: Session, *, recovering: bool = False
    ) -> RunsGoingOn | None:
        """Tell ``ctx`` which runs under way before this run it takes up (see ``take_up_runs``)."""
        return take_up_runs(ctx, session, self.agent, self.plugin_manager, self._is_resumable,
                            recovering=recovering)

    @property
    def _is_resumable(self) -> bool:
        config = self.resumability_config
        return bool(config and config.is_resumable)

    def run(
        self,
        *,
        user_id: str,
        session_id: str,
        new_message: types.Content | None = None,
        state_delta: dict[str, Any] | None = None,
        run_config: RunConfig | None = None,
    ) -> Generator[Event, None, None]:
        """Synchronous ``run_async``: drives it on a background thread with its own loop."""
        return iterate_in_thread(lambda: self.run_async(
            user_id=user_id, session_id=session_id, new_message=new_message,
            state_delta=state_delta, run_config=run_config,
        ))

    async def rewind_async(
        self, *, user_id: str, session_id: str, rewind_before_invocation_id: str,
        run_config: RunConfig | None = None,
    ) -> None:
        """Take the session back to before the invocation ``rewind_before_invocation_id``.

        See :mod:`orchestrator.runner_rewind`; InvocationNotFoundError if it is not there.
        ``run_config`` is accepted as google-adk accepts it; the whole session is read.
        """
        from orchestrator.runner_rewind import rewind_session

        session = await load_session(self, user_id, session_id, RunConfig())
        await rewind_session(self.session_service, self.artifact_service, session,
                             rewind_before_invocation_id)

    async def run_debug(
        self, user_messages: str | list[str], *, user_id: str = "debug_user_id",
        session_id: str = "debug_session_id", run_config: RunConfig | None = None,
        quiet: bool = False, verbose: bool = False,
    ) -> list[Event]:
        """Send messages one after the other and print the answers; return every event.

        See :mod:`orchestrator.runner_debug`.
        """
        from orchestrator.runner_debug import run_debug

        return await run_debug(self, user_messages, user_id=user_id, session_id=session_id,
                               run_config=run_config, quiet=quiet, verbose=verbose)

    async def close(self) -> None:
        """Close the toolsets of every agent and the plugins, and flush the session service.

        A plugin that fails to close is raised (as one RuntimeError) after the flush.
        """
        for toolset in _toolsets(self.agent):
            try:
                await asyncio.wait_for(toolset.close(), timeout=10)
            except Exception:  # closing is best effort; one bad toolset must not stop the rest
                logger.exception("Closing toolset %r failed", toolset)
        try:
            await self.plugin_manager.close()
        finally:
            await self.session_service.flush()

    async def __aenter__(self) -> Runner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

class InMemoryRunner(Runner):
    """A Runner wired to in-memory session, artifact and memory services."""

    def __init__(
        self,
        agent: BaseAgent | None = None,
        *,
        app_name: str | None = None,
        plugins: list[BasePlugin] | None = None,
        app: App | None = None,
    ) -> None:
        super().__init__(
            app=app,
            app_name=app_name or (None if app is not None else "InMemoryRunner"),
            agent=agent,
            plugins=plugins,
            artifact_service=InMemoryArtifactService(),
            session_service=InMemorySessionService(),
            memory_service=InMemoryMemoryService(),
        )


def _toolsets(agent: BaseAgent) -> list[BaseToolset]:
    found = [t for t in getattr(agent, "tools", []) if isinstance(t, BaseToolset)]
    for sub in agent.sub_agents:
        found.extend(_toolsets(sub))
    return found
