"""What one work item runs: a start, the answers a resume brings, or a recovery from the log.

:class:`~.service.InvocationService` takes a session's items one by one; for each,
:func:`plan_item` says which events to drive. The committed log decides
(:class:`~.ledger.CallLedger`): a record that lags its log belongs to a run cut off before
its record was saved; then the open calls' jobs are made sure of (publish-once) and the run
goes on from the log.

A resume turns stored call results into the events that continue the invocation. Worker
results of one step become one event by the calling agent (its state and artifact deltas in
the actions); answers from outside become a user event. An error the worker's tool
callbacks did not see (a deadline, a lost job) goes to the on_tool_error callbacks (the
plugins', then the agent's) here first. A ParallelAgent branch brings its own events, which
are committed before the answer to its call.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator.agents.context import ToolContext
from orchestrator.agents.invocation_context import InvocationContext
from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.agents.run_config import RunConfig, StreamingMode
from orchestrator.distributed.ledger import CallLedger
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, ToolResult, WorkItem
from orchestrator.distributed.redispatch import redispatch
from orchestrator.distributed.state_merge import merge_state_writes
from orchestrator.errors import RemoteToolError, SessionNotFoundError
from orchestrator.events.event import Event
from orchestrator.events.event_actions import EventActions
from orchestrator.flows import tool_callbacks
from orchestrator.flows.contents import RUN_BRANCH
from orchestrator.flows.functions import deep_merge
from orchestrator.runners import Runner
from orchestrator.sessions.base_session_service import SessionWriter
from orchestrator.sessions.session import Session

if TYPE_CHECKING:
    from orchestrator.distributed.service import InvocationService

logger = logging.getLogger(__name__)


@dataclass
class Plan:
    """One work item's effect: the run to drive (if any) and the invocation's calls."""

    ledger: CallLedger
    """The invocation's calls as the log has them, prelude included; the run's events are
    added as they are committed."""
    events: AsyncGenerator[Event, None] | None = None
    prelude: list[Event] = field(default_factory=list)
    """Events committed by this item before the run (published first)."""
    recovering: bool = False
    """The run continues an invocation whose earlier run was cut off (its record lags its log)."""

    @property
    def is_empty(self) -> bool:
        """True if the item changes nothing."""
        return self.events is None and not self.prelude


async def plan_item(
    service: InvocationService, runner: Runner, record: InvocationRecord, item: WorkItem,
    results: dict[str, ToolResult], session: Session | None, writer: SessionWriter,
) -> Plan:
    """What ``item`` runs on ``record``: a start, the answers it brings, or a recovery."""
    if record.status is InvocationStatus.QUEUED:
        if item.kind != "start":
            return Plan(CallLedger(record.invocation_id))
        return Plan(CallLedger(record.invocation_id),
                    events=_start(runner, record, session, writer))
    if session is None:
        raise session_deleted(record)
    ledger = CallLedger.of(session.events, record.invocation_id)
    interrupted = lags_its_log(record, ledger)
    if interrupted:
        # The log went further than the record: the orchestrator that held the session
        # died after committing events and before saving the record. Jobs of open calls
        # may never have gone out; then the run goes on from the log.
        logger.warning("Recovering invocation %r from its log", record.invocation_id)
        await _dispatch_open_calls(runner, record, ledger, results, session)
    plan = await plan_resume(service, runner, record, results, session, ledger, writer,
                             recovering=interrupted)
    plan.recovering = interrupted
    if plan.is_empty and interrupted:
        plan.events = runner.recover_async(
            user_id=record.user_id, session_id=record.session_id,
            invocation_id=record.invocation_id, run_config=run_config_for(record),
            session=session, session_writer=writer,
        )
    return plan


def session_deleted(record: InvocationRecord) -> SessionNotFoundError:
    """What ends an invocation that ran once its session is gone (it can never go on)."""
    return SessionNotFoundError(
        f"its session was deleted (app {record.app_name!r}, user {record.user_id!r}, "
        f"session {record.session_id!r}).")


def lags_its_log(record: InvocationRecord, ledger: CallLedger) -> bool:
    """True if the record lags its log: a run was cut off before the record was saved."""
    return record.status is InvocationStatus.RUNNING or set(record.pending_calls) != ledger.open


async def _dispatch_open_calls(
    runner: Runner, record: InvocationRecord, ledger: CallLedger,
    results: dict[str, ToolResult], session: Session,
) -> None:
    """Make sure every open remote call of the log has its job out (publish-once)."""
    if runner.transport is None:
        return
    # Calls made inside a branch that ran on a worker were run there: they wait for an
    # answer from outside, and have no job of their own.
    from_workers = {wire.get("id") for result in results.values() for wire in result.events}
    for entry in ledger.open_calls():
        if entry.id not in results and entry.event.id not in from_workers:
            await redispatch(runner, session, record.invocation_id, entry,
                             ledger.approved(entry.id))


def _start(
    runner: Runner, record: InvocationRecord, session: Session | None, writer: SessionWriter,
) -> AsyncGenerator[Event, None]:
    """The run of a queued invocation: its message (or state change) through the runner."""
    if record.state_delta is None and record.new_message is None:
        raise ValueError("An invocation needs a new_message or a state_delta.")
    message = types.Content.model_validate(record.new_message) if record.new_message else None
    return runner.run_async(
        user_id=record.user_id, session_id=record.session_id,
        invocation_id=record.invocation_id, new_message=message,
        state_delta=record.state_delta, run_config=run_config_for(record),
        yield_user_message=True,  # live streams show the message the invocation answers
        session=session, session_writer=writer,
    )


async def plan_resume(
    service: InvocationService, runner: Runner, record: InvocationRecord,
    results: dict[str, ToolResult], session: Session, ledger: CallLedger | None = None,
    writer: SessionWriter | None = None, *, recovering: bool = False,
) -> Plan:
    """What a resume runs: the answer events of every step whose calls are all answered.

    Only calls the log still has open are answered, so a result is committed once however
    often its resume is replayed (the orchestrator that committed it may have died before
    saving the record). A parallel branch's own events are committed first, as they arrive;
    the run continues in the calling agent once its last branch is in. Nothing to answer:
    an empty plan. ``ledger``: the invocation's calls, if the caller read them already;
    ``writer``: what commits the events (the session service by default); ``recovering``:
    the run that was going on stopped mid-way, and the continued run recovers it too.
    """
    ledger = ledger or CallLedger.of(session.events, record.invocation_id)
    plan = Plan(ledger)
    waiting = ledger.open
    if not any(cid in waiting for cid in results):
        return plan
    in_log = {e.id for e in session.events}
    answers: list[Event] = []
    direct: list[Event] = []
    for call_event in _events_with_calls(session, record.invocation_id, waiting):
        ids = [c.id for c in call_event.get_function_calls() if c.id in waiting]
        if any(c.name == RUN_BRANCH for c in call_event.get_function_calls()):
            batch, branches_in = _branch_results(call_event, ids, results, in_log)
            failed = any((results[cid].response or {}).get("error") for cid in branches_in)
            if failed or not ledger.unanswered_in(call_event) - branches_in:
                answers += batch  # the last branch is in, or one failed: the agent goes on
            else:
                direct += batch  # commit what arrived; others are still out
            continue
        ready = {i: results[i] for i in ids if i in results and results[i].response is not None}
        if ids and len(ready) == len(ids):
            answers += await _answer_events(service, runner, session, call_event, ready)
    writer = writer or service.session_service
    direct = await runner.commit_events(
        session=session, invocation_id=record.invocation_id, events=direct, session_writer=writer
    )
    for event in direct:
        ledger.record(event)
    plan.prelude = direct
    if answers:
        plan.events = runner.continue_async(
            user_id=record.user_id, session_id=record.session_id,
            invocation_id=record.invocation_id, answers=answers, session=session,
            run_config=run_config_for(record), yield_answers=True, session_writer=writer,
            recovering=recovering,
        )
    return plan


def _branch_results(
    call_event: Event,
    ids: list[str | None],
    results: dict[str, ToolResult],
    in_log: set[str],
) -> tuple[list[Event], set[str]]:
    """A parallel branch's events (not yet committed), then the answer to its call.

    Also returns the ids of the branches answered by these events.
    """
    batch: list[Event] = []
    answered: set[str] = set()
    for cid in ids:
        result = results.get(cid or "")
        if result is None:
            continue
        fresh = [Event.from_wire(w) for w in result.events if w.get("id") not in in_log]
        in_log.update(e.id for e in fresh)
        batch += fresh
        if result.response is None:
            continue  # the branch paused on its worker: its own calls wait for answers
        answered.add(result.function_call_id)
        batch.append(Event(
            id=answer_event_id(call_event.invocation_id, [result.function_call_id]),
            invocation_id=call_event.invocation_id,
            author=call_event.author,
            branch=call_event.branch,
            content=types.Content(role="user", parts=[types.Part(
                function_response=types.FunctionResponse(
                    id=result.function_call_id, name=RUN_BRANCH, response=result.response,
                ))]),
        ))
    return batch, answered


def answer_event_id(invocation_id: str, call_ids: list[str]) -> str:
    """The id of the event answering ``call_ids``: the same whoever builds it, however often.

    Appends ignore an event id already in the log, so an answer rebuilt by an orchestrator
    that took over from one that died is never committed twice.
    """
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"adk-celery:{invocation_id}:" + ",".join(sorted(call_ids))))


async def _answer_events(
    service: InvocationService, runner: Runner, session: Session, call_event: Event,
    ready: dict[str, ToolResult],
) -> list[Event]:
    """Worker results as one event by the calling agent; client answers as a user event."""
    by_source: dict[str, tuple[list[types.Part], EventActions]] = {}
    other: dict[str, dict[str, Any]] = {}
    writes: dict[str, list[tuple[dict[str, Any], dict[str, Any] | None]]] = {}
    agent = runner.agent.find_agent(call_event.author)
    for call in call_event.get_function_calls():
        result = ready.get(call.id or "")
        if result is None:
            continue
        parts, actions = by_source.setdefault(result.source, ([], EventActions()))
        response = result.response or {}
        if result.error and not result.error_callbacks_ran and isinstance(agent, LlmAgent) and (
            agent.on_tool_error_callback or runner.plugin_manager.plugins
        ):
            response = await _recover_remote_error(
                service, runner, agent, session, call_event, call, result, actions
            ) or response
        parts.append(types.Part(function_response=types.FunctionResponse(
            id=call.id, name=call.name, response=response)))
        writes.setdefault(result.source, []).append((result.state_delta, result.state_before))
        actions.artifact_delta.update(result.artifact_delta)
        if result.actions:  # the rest, deep-merged in call order as in process
            deep_merge(other.setdefault(result.source, {}), result.actions)
    events = []
    for source, (parts, actions) in by_source.items():
        # Each call changed its own copy of the state: none loses what another added.
        actions.state_delta.update(merge_state_writes(writes.get(source, [])))
        if other.get(source):
            merged = actions.model_dump(exclude_none=True)
            deep_merge(merged, other[source])
            actions = EventActions.model_validate(merged)
        ids = [p.function_response.id or "" for p in parts if p.function_response]
        events.append(Event(
            id=answer_event_id(call_event.invocation_id, ids),
            invocation_id=call_event.invocation_id,
            branch=call_event.branch,
            author=call_event.author if source == "worker" else "user",
            content=types.Content(role="user", parts=parts),
            actions=actions,
        ))
    return events


def _events_with_calls(session: Session, invocation_id: str, ids: set[str]) -> list[Event]:
    return [
        e for e in session.events
        if e.invocation_id == invocation_id and any(c.id in ids for c in e.get_function_calls())
    ]


async def _recover_remote_error(
    service: InvocationService,
    runner: Runner,
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
        branch=call_event.branch, plugin_manager=runner.plugin_manager,
    )
    tool_context = ToolContext(ctx, function_call_id=call.id, event_actions=actions)
    recovered = await tool_callbacks.on_tool_error(
        ctx, agent, tool, dict(call.args or {}), tool_context, RemoteToolError(result.error)
    )
    if recovered is None:
        return None
    return recovered if isinstance(recovered, dict) else {"result": recovered}


def run_config_for(record: InvocationRecord) -> RunConfig | None:
    """The run's config (None if it would be the default one).

    SSE streaming if asked for (so the chunks reach the stream), and the caller's
    ``custom_metadata``.
    """
    if not record.streaming and not record.custom_metadata:
        return None
    return RunConfig(
        streaming_mode=StreamingMode.SSE if record.streaming else StreamingMode.NONE,
        custom_metadata=record.custom_metadata)
