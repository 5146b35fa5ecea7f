"""InvocationService: the orchestrator's core, the same code in embedded and Celery modes.

Work for a session (start, resume, cancel) goes through that session's queue; whoever holds
the session's lease drains it, so one orchestrator at a time writes a session, in order.
A run that ends with open long-running calls leaves the invocation ``paused``: it is then
only data. Results of remote calls are stored under (invocation, call id); a ``resume``
item appends them as function responses (one event per calling step, once every call of
that step is answered) and continues the invocation in the agent that made the calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from google.genai import types

from orchestrator import platform
from orchestrator.agents import callbacks as cb
from orchestrator.agents.context import ToolContext
from orchestrator.agents.invocation_context import InvocationContext
from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.agents.run_config import RunConfig, StreamingMode
from orchestrator.artifacts.base_artifact_service import BaseArtifactService
from orchestrator.distributed.models import (
    InvocationRecord,
    InvocationStatus,
    ToolResult,
    WorkItem,
)
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.stores import (
    AnswerRejectedError,
    InvocationStore,
    Loaded,
    SessionKey,
    SessionQueue,
)
from orchestrator.distributed.transport import Transport
from orchestrator.events.event import Event
from orchestrator.events.event_actions import EventActions
from orchestrator.flows.contents import RUN_BRANCH
from orchestrator.memory.base_memory_service import BaseMemoryService
from orchestrator.runners import Runner
from orchestrator.sessions.base_session_service import BaseSessionService
from orchestrator.sessions.redis_scopes import prefetched
from orchestrator.sessions.session import Session

logger = logging.getLogger(__name__)

_CANCEL_CHECK_SECONDS = 0.25

EventSink = Callable[[InvocationRecord, Event], Awaitable[None]]
"""``await sink(record, event)`` for each event, in order; used for live event streams."""

SaveWithNextCommit = Callable[[InvocationRecord], None]
"""Has the next committed event also save this record (one atomic write for both)."""

RunContext = Callable[[InvocationRecord], contextlib.AbstractContextManager[SaveWithNextCommit | None]]
"""A context entered around each piece of work on an invocation (e.g. stream mirroring);
it may offer to save a record together with the next committed event."""


class RemoteToolError(RuntimeError):
    """A tool raised on a worker; passed to ``on_tool_error_callback``."""


def session_key(record: InvocationRecord) -> SessionKey:
    """The (app, user, session) a record belongs to."""
    return (record.app_name, record.user_id, record.session_id)


class InvocationService:
    """Runs queued invocations, pauses them on remote calls, and resumes them on answers."""

    def __init__(
        self,
        registry: AppRegistry,
        *,
        session_service: BaseSessionService,
        store: InvocationStore,
        queue: SessionQueue,
        transport: Transport | None = None,
        artifact_service: BaseArtifactService | None = None,
        memory_service: BaseMemoryService | None = None,
        lease_renew_seconds: float | None = None,
        event_sink: EventSink | None = None,
        run_context: RunContext | None = None,
    ) -> None:
        self.registry = registry
        self.event_sink = event_sink
        """Receives every event of every run as it happens (partial chunks included)."""
        self.run_context = run_context
        """Entered around each run; with it, a sink may leave committed events to the appends."""
        self.session_service = session_service
        self.store = store
        self.queue = queue
        self.artifact_service = artifact_service
        self._lease_renew_seconds = lease_renew_seconds
        self._runners = {
            app.name: Runner(
                app=app, session_service=session_service, artifact_service=artifact_service,
                memory_service=memory_service, transport=transport,
            )
            for app in registry
        }

    # ---- intake -----------------------------------------------------------------------

    async def submit(self, record: InvocationRecord) -> InvocationRecord:
        """Record a new invocation as queued and queue its start (idempotent per id)."""
        if await self.store.create(record):
            await self.queue.push(session_key(record), WorkItem(kind="start",
                                                                invocation_id=record.invocation_id))
            return record
        existing = await self.store.get(record.app_name, record.invocation_id)
        assert existing is not None
        return existing

    async def deliver(
        self,
        app_name: str,
        invocation_id: str,
        result: ToolResult,
        key: SessionKey | None = None,
    ) -> SessionKey | None:
        """Store a call's result and queue a resume; None if there is nothing to resume.

        ``key`` (app, user, session) saves looking the invocation up when the job carries it.
        A second copy of a result is ignored (no second resume is queued).
        """
        if key is None:
            record = await self.store.get(app_name, invocation_id)
            if record is None:
                logger.warning("Result for unknown invocation %s/%s dropped", app_name, invocation_id)
                return None
            key = session_key(record)
        if result.response is None and not result.events:
            # Still waiting for an answer from outside: store the placeholder, resume nothing.
            await self.store.put_result(app_name, invocation_id, result)
            return None
        resume = WorkItem(kind="resume", invocation_id=invocation_id)
        return key if await self.queue.push(key, resume, result=result) else None

    async def answer(
        self,
        app_name: str,
        invocation_id: str,
        function_call_id: str,
        response: dict[str, Any],
    ) -> SessionKey:
        """Answer a pending call from outside (a human, another service); queue a resume.

        Raises AnswerRejectedError (nothing stored) for an unknown invocation, a call id the
        invocation is not waiting for, or a call that already has its answer.
        """
        record = await self.store.get(app_name, invocation_id)
        if record is None:
            raise AnswerRejectedError(f"Unknown invocation {invocation_id!r} of app {app_name!r}.")
        if record.status.is_terminal:
            raise AnswerRejectedError(
                f"Invocation {invocation_id!r} is {record.status.value}; it takes no answers."
            )
        if function_call_id not in record.pending_calls:
            raise AnswerRejectedError(
                f"Invocation {invocation_id!r} has no pending call {function_call_id!r} "
                f"(pending: {record.pending_calls or 'none'})."
            )
        name = await self._call_name(record, function_call_id)
        result = ToolResult(
            function_call_id=function_call_id, tool_name=name, response=response, source="client"
        )
        if not await self.store.put_result(app_name, invocation_id, result):
            raise AnswerRejectedError(f"Call {function_call_id!r} was already answered.")
        key = session_key(record)
        await self.queue.push(key, WorkItem(kind="resume", invocation_id=invocation_id))
        return key

    async def cancel(self, app_name: str, invocation_id: str) -> SessionKey | None:
        """Request cancellation; the next holder of the session records it."""
        record = await self.store.get(app_name, invocation_id)
        if record is None:
            return None
        await self.store.request_cancel(app_name, invocation_id)
        key = session_key(record)
        await self.queue.push(key, WorkItem(kind="cancel", invocation_id=invocation_id))
        return key

    # ---- processing -------------------------------------------------------------------

    async def drain(self, key: SessionKey, hint: str | None = None) -> bool:
        """Process the session's queue if its lease is free; False if another holder has it.

        ``hint``: the invocation expected first (read together with taking the lease).
        """
        taken = await self.queue.take(key, hint)
        if taken is None:
            return False
        token, item, loaded = taken
        if item is None:
            return True  # nothing queued (the lease went back at once)
        renewer = self._start_renewer(key, token)
        released = False
        try:
            with self.queue.fencing(key, token):
                while item is not None:
                    ended = await self._process(key, item, loaded)
                    loaded = None
                    # The record is saved in the step that claims the next item or lets go.
                    item = await self.queue.claim_or_release(key, token, finished=item, save=ended)
                released = True  # the queue was empty and the lease went with it
        finally:
            if renewer is not None:
                renewer.cancel()
            if not released:
                await self.queue.release(key, token)
        return True

    def _start_renewer(self, key: SessionKey, token: str) -> asyncio.Task[None] | None:
        if not self._lease_renew_seconds:
            return None
        interval = self._lease_renew_seconds

        async def renew() -> None:
            while True:
                await asyncio.sleep(interval)
                if not await self.queue.renew(key, token):
                    logger.error("Lost the lease of session %s", key)
                    return

        return asyncio.ensure_future(renew())

    async def _process(
        self, key: SessionKey, item: WorkItem, loaded: Loaded | None
    ) -> InvocationRecord | None:
        """Work on one item; return the record to save when done (None: nothing changed)."""
        if loaded is None:
            loaded = await self.store.load(key[0], item.invocation_id)
        record, cancelled, results, _ = loaded
        if record is None:
            logger.warning("Work item for unknown invocation %s dropped", item.invocation_id)
            return None
        if record.status.is_terminal:
            return None
        if item.kind == "cancel" or cancelled:
            return _ended(record, InvocationStatus.CANCELLED)
        runner = self._runners.get(record.app_name)
        if runner is None:
            return _failed(record, f"UnknownAppError: unknown app {record.app_name!r}; this "
                                   f"orchestrator serves: {', '.join(self.registry.names) or 'none'}.")
        try:
            with (self.run_context(record) if self.run_context else contextlib.nullcontext()
                  as save_with_commit, prefetched(loaded.session)):
                plan = await self._plan(runner, record, item, results)
                if plan.events is None and not plan.prelude:
                    return None
                return await self._drive(record, plan, save_with_commit)
        except Exception as error:
            logger.info("Invocation %s failed: %s", record.invocation_id, error)
            return _failed(record, f"{type(error).__name__}: {error}")

    async def _plan(
        self, runner: Runner, record: InvocationRecord, item: WorkItem,
        results: dict[str, ToolResult],
    ) -> _Plan:
        """What this work item runs, and how it changes the pending calls."""
        if item.kind == "start" and record.status is InvocationStatus.QUEUED:
            return _Plan(events=await self._start(runner, record))
        if item.kind == "start" and record.status is InvocationStatus.RUNNING:
            return _Plan(events=self._recover_crashed(runner, record))
        return await self._resume(runner, record, results)

    async def _start(self, runner: Runner, record: InvocationRecord) -> AsyncGenerator[Event, None]:
        if record.state_delta is None and record.new_message is None:
            raise ValueError("An invocation needs a new_message or a state_delta.")
        message = types.Content.model_validate(record.new_message) if record.new_message else None
        return runner.run_async(
            user_id=record.user_id, session_id=record.session_id,
            invocation_id=record.invocation_id, new_message=message,
            state_delta=record.state_delta, run_config=_run_config(record),
            yield_user_message=True,  # live streams show the message the invocation answers
        )

    def _recover_crashed(
        self, runner: Runner, record: InvocationRecord
    ) -> AsyncGenerator[Event, None]:
        """A start left running by a dead orchestrator: resume it if the app allows."""
        config = runner.resumability_config
        if not (config and config.is_resumable):
            raise RuntimeError(
                "The orchestrator running this invocation stopped mid-run and the app is not "
                "resumable; make it resumable to continue such invocations."
            )
        return runner.run_async(
            user_id=record.user_id, session_id=record.session_id,
            invocation_id=record.invocation_id,
        )

    async def _resume(
        self, runner: Runner, record: InvocationRecord, results: dict[str, ToolResult]
    ) -> _Plan:
        pending = set(record.pending_calls)
        if not any(cid in pending for cid in results):
            return _Plan()
        session = await self.session_service.get_session(
            app_name=record.app_name, user_id=record.user_id, session_id=record.session_id
        )
        if session is None:
            raise LookupError(f"Session {record.session_id!r} disappeared.")
        plan = _Plan()
        in_log = {e.id for e in session.events}
        answered_in_log = {
            r.id for e in session.events for r in e.get_function_responses() if r.id
        }
        answers: list[Event] = []
        direct: list[Event] = []
        for call_event in _events_with_calls(session, record.invocation_id, pending):
            ids = [c.id for c in call_event.get_function_calls() if c.id in pending]
            if any(c.name == RUN_BRANCH for c in call_event.get_function_calls()):
                batch = self._branch_results(call_event, ids, results, in_log, plan)
                every = [c.id for c in call_event.get_function_calls() if c.id]
                if all(i in plan.answered or i in answered_in_log for i in every):
                    answers += batch  # the last branch is in: the agent goes on
                else:
                    direct += batch  # commit what arrived; others are still out
                continue
            ready = {i: results[i] for i in ids if i in results and results[i].response is not None}
            if ids and len(ready) == len(ids):
                answers += await self._answer_events(runner, session, call_event, ready)
                plan.answered.update(i for i in ids if i)
        for event in direct:
            await self.session_service.append_event(session, event)
        plan.prelude = direct
        if answers:
            plan.events = runner.continue_async(
                user_id=record.user_id, session_id=record.session_id,
                invocation_id=record.invocation_id, answers=answers, session=session,
                run_config=_run_config(record), yield_answers=True,
            )
        return plan

    def _branch_results(
        self,
        call_event: Event,
        ids: list[str | None],
        results: dict[str, ToolResult],
        in_log: set[str],
        plan: _Plan,
    ) -> list[Event]:
        """A parallel branch's events (not yet committed), then the answer to its call."""
        batch: list[Event] = []
        for cid in ids:
            result = results.get(cid or "")
            if result is None:
                continue
            fresh = [Event.from_wire(w) for w in result.events if w.get("id") not in in_log]
            in_log.update(e.id for e in fresh)
            batch += fresh
            for event in fresh:
                plan.opened |= event.long_running_tool_ids or set()
            if result.response is None:
                continue  # the branch paused on its worker: its own calls wait for answers
            plan.answered.add(result.function_call_id)
            batch.append(Event(
                invocation_id=call_event.invocation_id,
                author=call_event.author,
                branch=call_event.branch,
                content=types.Content(role="user", parts=[types.Part(
                    function_response=types.FunctionResponse(
                        id=result.function_call_id, name=RUN_BRANCH, response=result.response,
                    ))]),
            ))
        return batch

    async def _answer_events(
        self, runner: Runner, session: Session, call_event: Event, ready: dict[str, ToolResult]
    ) -> list[Event]:
        """Worker results as one event by the calling agent; client answers as a user event."""
        by_source: dict[str, tuple[list[types.Part], EventActions]] = {}
        agent = runner.agent.find_agent(call_event.author)
        for call in call_event.get_function_calls():
            result = ready.get(call.id or "")
            if result is None:
                continue
            parts, actions = by_source.setdefault(result.source, ([], EventActions()))
            response = result.response or {}
            if result.error and isinstance(agent, LlmAgent) and agent.on_tool_error_callback:
                response = await _recover_remote_error(
                    self, agent, session, call_event, call, result, actions
                ) or response
            parts.append(types.Part(function_response=types.FunctionResponse(
                id=call.id, name=call.name, response=response)))
            actions.state_delta.update(result.state_delta)
            actions.artifact_delta.update(result.artifact_delta)
        events = []
        for source, (parts, actions) in by_source.items():
            events.append(Event(
                invocation_id=call_event.invocation_id,
                branch=call_event.branch,
                author=call_event.author if source == "worker" else "user",
                content=types.Content(role="user", parts=parts),
                actions=actions,
            ))
        return events

    async def _drive(
        self, record: InvocationRecord, plan: _Plan, save_with_commit: SaveWithNextCommit | None
    ) -> InvocationRecord:
        if record.status is InvocationStatus.QUEUED:
            # Resumes skip this write: paused -> completed is one step for watchers.
            record.status = InvocationStatus.RUNNING
            record.updated_at = platform.get_time()
            if save_with_commit is not None:
                # "running" lands with the user's message: a crash before it leaves the
                # invocation queued (nothing of it ran), after it, running with its message.
                save_with_commit(record)
            else:
                await self.store.save(record)
        pending = (set(record.pending_calls) - plan.answered) | plan.opened
        for event in plan.prelude:
            if self.event_sink is not None:
                await self.event_sink(record, event)
            pending -= {r.id for r in event.get_function_responses() if r.id}
        checked = time.monotonic()
        cancelled = False
        if plan.events is not None:
            async with contextlib.aclosing(plan.events):
                async for event in plan.events:
                    if self.event_sink is not None:
                        await self.event_sink(record, event)
                    if event.partial:
                        continue
                    pending -= {r.id for r in event.get_function_responses() if r.id}
                    if event.long_running_tool_ids:
                        pending |= event.long_running_tool_ids
                    if time.monotonic() - checked > _CANCEL_CHECK_SECONDS:
                        checked = time.monotonic()
                        if await self.store.is_cancelled(record.app_name, record.invocation_id):
                            cancelled = True
                            break
        record.pending_calls = sorted(pending)
        if cancelled:
            status = InvocationStatus.CANCELLED
        else:
            status = InvocationStatus.PAUSED if pending else InvocationStatus.COMPLETED
        return _ended(record, status)

    async def _call_name(self, record: InvocationRecord, function_call_id: str) -> str:
        session = await self.session_service.get_session(
            app_name=record.app_name, user_id=record.user_id, session_id=record.session_id
        )
        for event in session.events if session else []:
            for call in event.get_function_calls():
                if call.id == function_call_id:
                    return call.name or ""
        raise AnswerRejectedError(f"No call {function_call_id!r} in the session log.")





@dataclass
class _Plan:
    """One work item's effect: the run to drive (if any) and its bookkeeping."""

    events: AsyncGenerator[Event, None] | None = None
    answered: set[str] = field(default_factory=set)
    """Pending calls answered by this item."""
    opened: set[str] = field(default_factory=set)
    """Calls that became pending through events committed by this item."""
    prelude: list[Event] = field(default_factory=list)
    """Events committed by this item before the run (published first)."""


def _ended(record: InvocationRecord, status: InvocationStatus) -> InvocationRecord:
    """The record with its new status, to be saved as the work item ends."""
    record.status = status
    record.updated_at = platform.get_time()
    return record


def _failed(record: InvocationRecord, error: str) -> InvocationRecord:
    record.error = error
    return _ended(record, InvocationStatus.FAILED)


def _run_config(record: InvocationRecord) -> RunConfig | None:
    """SSE streaming for invocations that asked for it, so their chunks reach the stream."""
    return RunConfig(streaming_mode=StreamingMode.SSE) if record.streaming else None


def _events_with_calls(session: Session, invocation_id: str, ids: set[str]) -> list[Event]:
    return [
        e for e in session.events
        if e.invocation_id == invocation_id and any(c.id in ids for c in e.get_function_calls())
    ]


async def _recover_remote_error(
    service: InvocationService,
    agent: LlmAgent,
    session: Session,
    call_event: Event,
    call: types.FunctionCall,
    result: ToolResult,
    actions: EventActions,
) -> dict[str, Any] | None:
    tools = {t.name: t for t in await agent.canonical_tools(None)}
    tool = tools.get(call.name or "")
    if tool is None:
        return None
    ctx = InvocationContext(
        session_service=service.session_service, invocation_id=call_event.invocation_id,
        agent=agent, session=session, artifact_service=service.artifact_service,
        branch=call_event.branch,
    )
    tool_context = ToolContext(ctx, function_call_id=call.id, event_actions=actions)
    recovered = await cb.run_until(
        agent.on_tool_error_callback,
        {"tool": tool, "args": dict(call.args or {}), "tool_context": tool_context,
         "error": RemoteToolError(result.error)},
        stop=cb.is_not_none,
    )
    if recovered is None:
        return None
    return recovered if isinstance(recovered, dict) else {"result": recovered}
