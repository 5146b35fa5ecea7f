"""A remote call's job: running it, and handing its result back.

Running it is the body every transport executes, on a worker or in process.

Handing a result back (:func:`deliver_result`) needs only the invocation store and the
session queue, never the orchestrator's Runner loop: a worker, the orchestrators' job
watchdog (a call answered at its deadline) and :meth:`InvocationService.deliver` share it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from google.genai import types

from orchestrator import observe
from orchestrator.agents.context import ReadonlyContext, ToolContext
from orchestrator.agents.invocation_context import InvocationContext
from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.artifacts.base_artifact_service import BaseArtifactService
from orchestrator.distributed.intake import Limits, check_json, not_json_answer
from orchestrator.distributed.ledger import CallLedger
from orchestrator.distributed.models import AgentJob, ToolJob, ToolResult, WorkItem
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.stores import InvocationStore, SessionKey, SessionQueue, session_key
from orchestrator.errors import PayloadError, error_text, raised_by_service
from orchestrator.events.event import Event
from orchestrator.events.event_actions import EventActions
from orchestrator.events.state_json import STRICT_JSON
from orchestrator.flows import tool_callbacks
from orchestrator.flows.contents import RUN_BRANCH, on_or_below
from orchestrator.plugins.plugin_manager import PluginManager
from orchestrator.sessions.in_memory_session_service import InMemorySessionService
from orchestrator.sessions.session import Session
from orchestrator.tools.tool_confirmation import ToolConfirmation

logger = logging.getLogger(__name__)


def worker_id() -> str:
    """The calling process's name in the job journal, heartbeats and results: ``<host>:<pid>``.

    Read at each use, never at import: a prefork pool's child imports this module in its
    parent, before the fork, and must name itself (the process running the job, the one
    whose death the watchdog notices), not the parent.
    """
    return f"{socket.gethostname()}:{os.getpid()}"


def _error(job: ToolJob, message: str, *, callbacks_ran: bool = False) -> ToolResult:
    return ToolResult(
        function_call_id=job.function_call_id, tool_name=job.tool_name,
        response={"error": message}, error=message, worker=worker_id(),
        error_callbacks_ran=callbacks_ran,
    )


async def execute_tool_job(
    job: ToolJob,
    registry: AppRegistry,
    *,
    artifact_service: BaseArtifactService | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    limits: Limits | None = None,
) -> ToolResult:
    """Run the job's tool with a ToolContext over a state snapshot.

    A result (response, state or artifact delta, actions) that is not strict JSON within
    ``limits``' nesting depth is answered with an error saying what and where, once: it
    could be neither stored nor read back, and running the tool again would not mend it.

    Raises only when a service the tool called could not reach its store
    (:func:`~orchestrator.errors.raised_by_service`): the job is then run again, not answered.

    Only tools registered on the issuing agent of a registered app can run. The tool
    callbacks run here, around the tool: the app's plugins, then the agent's (before-tool,
    on-tool-error, after-tool), as in process. State writes are returned as a delta; a falsy
    result of a long-running tool leaves the call pending.
    """
    try:
        app = registry.get(job.app_name)
    except LookupError as error:
        return _error(job, str(error))
    agent = app.root_agent.find_agent(job.agent_name)
    if not isinstance(agent, LlmAgent):
        return _error(job, f"Agent {job.agent_name!r} is not an LlmAgent of app {job.app_name!r}.")
    session = Session(
        id=job.session_id, app_name=job.app_name, user_id=job.user_id, state=dict(job.state)
    )
    ctx = InvocationContext(
        session_service=None,  # type: ignore[arg-type]  (workers never write sessions)
        invocation_id=job.invocation_id,
        agent=agent,
        session=session,
        artifact_service=artifact_service,
        branch=job.branch,
        user_content=types.Content.model_validate(job.user_content) if job.user_content else None,
        progress_reporter=progress,
        plugin_manager=PluginManager(app.plugins),
    )
    # Resolved for this invocation (toolsets keep their listing per invocation id).
    tools = {tool.name: tool for tool in await agent.canonical_tools(ReadonlyContext(ctx))}
    tool = tools.get(job.tool_name)
    if tool is None:
        return _error(
            job,
            f"Tool {job.tool_name!r} is not registered on agent {job.agent_name!r} of app "
            f"{job.app_name!r}; workers run only registered tools.",
        )
    confirmation = (
        ToolConfirmation.model_validate(job.tool_confirmation) if job.tool_confirmation else None
    )
    tool_context = ToolContext(
        ctx, function_call_id=job.function_call_id, tool_confirmation=confirmation
    )
    tool_context.attempt = job.attempt
    sent = _containers_as_sent(job.state)
    return _json_only(job, await _run_tool(job, ctx, agent, tool, tool_context, sent),
                      limits or Limits())


async def _run_tool(
    job: ToolJob, ctx: InvocationContext, agent: LlmAgent, tool: Any, tool_context: ToolContext,
    sent: dict[str, str] | None,
) -> ToolResult:
    args = dict(job.args)

    async def invoke() -> Any:
        return await observe.timed_tool(
            tool.name, tool.run_async(args=args, tool_context=tool_context))

    try:
        result = await tool_callbacks.call_tool(ctx, agent, tool, args, tool_context, invoke)
    except asyncio.CancelledError:
        raise  # the job is stopped: nothing to answer
    except BaseException as raised:  # the model reads the failure as an error response
        # (a callback's ``sys.exit`` too: it must not end the worker's loop or pool thread)
        error = tool_callbacks.as_tool_error(raised)
        if raised_by_service(error):
            raise  # Redis away under a service the tool called: run it again, do not answer
        return _error(job, error_text(error), callbacks_ran=True).model_copy(
            update={"state_delta": dict(tool_context.actions.state_delta),
                    "state_before": _before(job, tool_context.actions.state_delta, sent),
                    "actions": other_actions(tool_context.actions)}
        )
    if tool_context.actions.requested_tool_confirmations:
        # Its answer would be provisional, and a job's first stored result is final: the
        # confirmed run could never answer. A confirmation gate is asked before the job.
        return _error(job, f"Tool {tool.name!r} asked for a confirmation "
                           "(tool_context.request_confirmation), which a tool running on workers "
                           "cannot do; give it require_confirmation instead (the user is then "
                           "asked before its job is sent).")
    response: dict[str, Any] | None
    if tool.is_long_running and not result:
        response = None
    elif isinstance(result, dict):
        response = result
    else:
        response = {"result": result}
    return ToolResult(
        function_call_id=job.function_call_id,
        tool_name=job.tool_name,
        response=response,
        state_delta=dict(tool_context.actions.state_delta),
        state_before=_before(job, tool_context.actions.state_delta, sent),
        artifact_delta=dict(tool_context.actions.artifact_delta),
        actions=other_actions(tool_context.actions),
        worker=worker_id(),
    )


def _containers_as_sent(state: dict[str, Any]) -> dict[str, str] | None:
    """The JSON text of each dict or list in a job's state snapshot, before its tool runs.

    A tool changes containers read from state in place: these texts are what the job was
    sent, for :func:`_before`. One C-speed dump per container (a job's state came as JSON);
    None if one is not JSON (an embedded run's own object): what the job saw is not known.
    """
    try:
        return {key: json.dumps(value) for key, value in state.items()
                if isinstance(value, dict | list)}
    except (TypeError, ValueError):
        return None


def _before(job: ToolJob, delta: dict[str, Any], sent: dict[str, str] | None
            ) -> dict[str, Any] | None:
    """What the job's snapshot held of each key the tool wrote (for merging its turn's writes)."""
    if sent is None:
        return None  # not known: its writes win over the earlier calls' as they are
    return {key: json.loads(sent[key]) if key in sent else job.state[key]
            for key in delta if key in job.state}


def _json_only(job: ToolJob, result: ToolResult, limits: Limits) -> ToolResult:
    """``result``, or an error answer naming what of it is not JSON (its writes dropped)."""
    refusal = not_json_answer(job.tool_name, {
        field: getattr(result, field)
        for field in ("response", "state_delta", "artifact_delta", "actions")}, limits)
    if refusal is not None:
        return _error(job, refusal, callbacks_ran=result.error_callbacks_ran)
    return result


def other_actions(actions: EventActions) -> dict[str, Any]:
    """The actions a tool set besides its state and artifact deltas, as JSON (only set ones)."""
    # Strict: an agent_state of no JSON type must fail the JSON check, not travel as a repr.
    return actions.model_dump(mode="json", exclude_defaults=True, context=STRICT_JSON, exclude={
        "state_delta", "artifact_delta", "requested_tool_confirmations"})


async def execute_agent_job(
    job: AgentJob,
    registry: AppRegistry,
    *,
    artifact_service: BaseArtifactService | None = None,
    on_event: Callable[[Event], Awaitable[None]] | None = None,
    tool_timeout_seconds: float | None = None,
    limits: Limits | None = None,
) -> ToolResult:
    """Run one parallel branch against a private copy of its history.

    Raises only as :func:`execute_tool_job` does, when a service could not reach its store.

    ``tool_timeout_seconds``: a worker's setting of that name. Given, each tool call of the
    branch gets the deadline a tool job of that tool would get (its ``adk_celery_timeout``
    metadata, else this; 0: none) and is answered with a timeout error at it (see
    :mod:`orchestrator.flows.tool_deadlines`); None: no deadlines. The branch has none.

    The branch's events are committed to that copy as they come (so the branch sees its own
    progress, as in process) and returned in order for the orchestrator to commit for real.
    A branch that pauses returns its events with no response; one that fails returns them
    with the error.

    Its events go back as JSON (within ``limits``' nesting depth): a tool call of the branch
    whose result or writes are not is answered with the error a tool job gets, and the
    branch goes on (see :attr:`InvocationContext.json_limits`); any other event that is not
    JSON (an agent callback's state write, say) fails the branch with an error naming it,
    the events before it kept. Either way once: running the branch again would not mend it.
    """
    limits = limits or Limits()
    try:
        app = registry.get(job.app_name)
    except LookupError as error:
        return _agent_error(job, str(error), [])
    parallel = app.root_agent.find_agent(job.parallel_agent)
    sub = next((s for s in parallel.sub_agents if s.name == job.agent_name), None) if parallel else None
    if sub is None:
        return _agent_error(
            job, f"Agent {job.agent_name!r} is not a branch of {job.parallel_agent!r} in app "
                 f"{job.app_name!r}.", [])
    sessions = InMemorySessionService()
    session = await sessions.create_session(
        app_name=job.app_name, user_id=job.user_id, session_id=job.session_id
    )
    # The snapshot already has every delta applied: install it as is, temp: keys included.
    session.state = dict(job.state)
    session.events = [Event.from_wire(e) for e in job.events]
    ctx = InvocationContext(
        session_service=sessions,
        invocation_id=job.invocation_id,
        agent=sub,
        session=session,
        artifact_service=artifact_service,
        branch=job.branch,
        user_content=types.Content.model_validate(job.user_content) if job.user_content else None,
        resumability_config=app.resumability_config,
        plugin_manager=PluginManager(app.plugins),
        tool_timeout_seconds=tool_timeout_seconds,
        json_limits=limits,
    )
    produced: list[Event] = []
    try:
        async for event in sub.run_async(ctx):
            if on_event is not None:
                await on_event(event)
            if not event.partial:
                await sessions.append_event(session, event)
                produced.append(event)
    except asyncio.CancelledError:
        raise  # the job is stopped: nothing to answer
    except BaseException as raised:  # the orchestrator fails the invocation with this error
        error = tool_callbacks.as_tool_error(raised)
        if raised_by_service(error):
            raise  # Redis away under a service the branch called: run it again
        return _agent_error(job, error_text(error), produced, limits)
    events, refusal = _wire(job, produced, limits)
    if refusal is not None:
        return _agent_error(job, refusal, produced, limits)
    paused = _waits(session.events, job)
    return ToolResult(
        function_call_id=job.function_call_id,
        tool_name=RUN_BRANCH,
        response=None if paused else {"status": "completed"},
        events=events,
        worker=worker_id(),
    )


def _wire(
    job: AgentJob, produced: list[Event], limits: Limits
) -> tuple[list[dict[str, Any]], str | None]:
    """The events' JSON forms up to the first that is not JSON, and what is wrong with it."""
    events: list[dict[str, Any]] = []
    for index, event in enumerate(produced):
        try:
            try:
                wire = event.to_wire()
            except ValueError:  # a value of no JSON type (pydantic's message names no place)
                raise _not_json_place(event) from None
            check_json("event", wire, limits)
        except PayloadError as error:
            return events, (f"Event {index} of branch {job.agent_name!r} (by {event.author!r}) is "
                            f"not JSON: {error}")
        events.append(wire)
    return events, None


_MARK = "\x00adk-celery:not-json:"


def _not_json_place(event: Event) -> PayloadError:
    """Where in ``event`` the first value of no JSON type is, as check_json would name it."""
    marked = event.model_dump(mode="json", by_alias=True, exclude_none=True, context=STRICT_JSON,
                              fallback=lambda value: _MARK + type(value).__name__)
    stack: list[tuple[str, Any]] = [("event", marked)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str) and item.startswith(_MARK):
            return PayloadError(where, f"a {item[len(_MARK):]} is not JSON.")
        if isinstance(item, dict):
            stack.extend((f"{where}.{key}", child) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", child) for i, child in reversed(list(enumerate(item))))
    return PayloadError("event", "holds a value of no JSON type.")


def _waits(events: list[Event], job: AgentJob) -> bool:
    """True if the branch's log leaves one of its calls open (it waits for an answer).

    Read from the log, as the orchestrator decides a pause: an agent that made a
    long-running call marks itself paused (as google-adk's does) even when the tool had its
    answer at once, and such a branch is over, not waiting.
    """
    ledger = CallLedger.of(events, job.invocation_id)
    return any(on_or_below(ledger.calls[cid].event.branch, job.branch) for cid in ledger.open)


def _agent_error(
    job: AgentJob, message: str, produced: list[Event], limits: Limits | None = None
) -> ToolResult:
    events, refusal = _wire(job, produced, limits or Limits())
    if refusal is not None and refusal not in message:
        message = f"{message} ({refusal})"
    return ToolResult(
        function_call_id=job.function_call_id, tool_name=RUN_BRANCH,
        response={"error": message}, error=message, events=events, worker=worker_id(),
    )


async def deliver_result(
    store: InvocationStore,
    queue: SessionQueue,
    app_name: str,
    invocation_id: str,
    result: ToolResult,
    key: SessionKey | None = None,
) -> SessionKey | None:
    """Store a call's result and queue a resume; None if there is nothing to resume.

    ``key`` (app, user, session) saves looking the invocation up when the job carries it.
    A second copy of a result is ignored (no second resume is queued): the first stored
    result wins.
    """
    if key is None:
        record = await store.get(app_name, invocation_id)
        if record is None:
            logger.warning("Result for unknown invocation %r/%r dropped", app_name, invocation_id)
            return None
        key = session_key(record)
    if not result.answered:
        # Still waiting for an answer from outside: store the placeholder, resume nothing.
        await store.put_result(app_name, invocation_id, result)
        return None
    resume = WorkItem(kind="resume", invocation_id=invocation_id)
    return key if await queue.push(key, resume, result=result) else None
