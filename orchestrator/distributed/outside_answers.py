"""Which pending calls take an answer from outside (a client, the HTTP API, a human).

A call left to the outside is a long-running tool's (google-adk's protocol: the client sends
its FunctionResponse) or a confirmation or credential request. Every other pending call is
answered by what runs it: a parallel branch's call by its branch, a plain tool routed to a
worker by the tool. An answer sent for one of those would decide in the agent's place (a
branch "completed" that never ran), so it is refused.

Only an orchestrator has the apps to tell: as it pauses, it lists the calls answered inside
in the record (:attr:`InvocationRecord.inside_calls`), and whoever takes an answer (the
service, the HTTP API, a client without the apps) checks the record.

:func:`take_answers` is that checked path: the answers of one request are stored with the
invocation's resume in one step, all or nothing. :func:`queue_cancel` is the other request
from outside: a cancel, recorded by whoever holds the session next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from orchestrator import failpoints
from orchestrator.distributed.intake import (
    Limits,
    check_answer,
    check_confirmation,
    check_identifier,
)
from orchestrator.distributed.ledger import CallEntry
from orchestrator.distributed.models import InvocationRecord, ToolResult, WorkItem
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.stores import InvocationStore, SessionKey, SessionQueue, session_key
from orchestrator.errors import (
    AnswerRejectedError,
    RequestError,
    UnknownInvocationError,
    no_invocation_text,
)
from orchestrator.flows.contents import REQUEST_CONFIRMATION, REQUEST_CREDENTIAL, RUN_BRANCH
from orchestrator.sessions.base_session_service import BaseSessionService

_REQUESTS = frozenset({REQUEST_CONFIRMATION, REQUEST_CREDENTIAL})


def answered_inside(registry: AppRegistry, app_name: str, calls: Iterable[CallEntry]) -> list[str]:
    """The ids among ``calls`` that only what runs them may answer (sorted)."""
    return sorted(entry.id for entry in calls if _inside(registry, app_name, entry))


def check_outside_answer(record: InvocationRecord, function_call_id: str) -> None:
    """AnswerRejectedError if ``function_call_id`` of ``record`` is answered inside only."""
    if function_call_id not in record.inside_calls:
        return
    name = record.pending_tools.get(function_call_id, "")
    if name == RUN_BRANCH:
        raise AnswerRejectedError(
            f"Call {function_call_id!r} runs a parallel branch: it is answered by its branch, "
            "not from outside.")
    raise AnswerRejectedError(
        f"Call {function_call_id!r} of tool {name!r} is answered by the tool itself (it is not "
        "a long-running tool), not from outside.")


async def take_answers(
    store: InvocationStore, queue: SessionQueue, sessions: BaseSessionService, limits: Limits,
    app_name: str, invocation_id: str, answers: Sequence[tuple[str, Any]],
) -> SessionKey:
    """Answer pending calls of one invocation from outside and queue its resume.

    ``answers``: (call id, response) pairs. All are stored with the resume in one step, or
    none: an answer stored without its resume (a crash or an outage between two writes)
    would leave the invocation paused for ever, every later answer refused as a second one.
    Raises RequestError for malformed input, AnswerRejectedError for an unknown or finished
    invocation, a call it does not wait for, one only what runs it may answer, or one that
    has its answer already; nothing is stored then. The very answers stored already (from
    outside) are taken, once: a request sent again after its reply was lost is not refused.
    """
    check_identifier("app_name", app_name, limits)
    if not answers:
        raise RequestError("answers", "must hold at least one answer.")
    checked = [(call_id, check_answer(invocation_id, call_id, response, limits))
               for call_id, response in answers]
    record = await store.get(app_name, invocation_id)
    if record is None:
        raise UnknownInvocationError(no_invocation_text(app_name, invocation_id))
    try:
        return await _take(store, queue, sessions, record, checked)
    except AnswerRejectedError:
        # The same answers taken already (a request sent again: its first try stored them,
        # and its reply was lost; the invocation may have gone on since): taken, once.
        if taken_already(await store.results(app_name, invocation_id), checked):
            return session_key(record)
        raise


def taken_already(stored: Mapping[str, ToolResult], answers: Iterable[tuple[str, Any]]) -> bool:
    """True if every (call id, response) of ``answers`` is stored already, from outside.

    ``stored``: the invocation's results. The very answers taken before: a request sent
    again after its reply was lost, which is taken once, not refused.
    """
    return all((result := stored.get(call_id)) is not None and result.source == "client"
               and result.response == response for call_id, response in answers)


async def _take(
    store: InvocationStore, queue: SessionQueue, sessions: BaseSessionService,
    record: InvocationRecord, checked: list[tuple[str, dict[str, Any]]],
) -> SessionKey:
    """Check ``checked`` (call id, response) against ``record`` and store them (see above)."""
    invocation_id = record.invocation_id
    if record.status.is_finished:
        raise AnswerRejectedError(
            f"Invocation {invocation_id!r} is {record.status.value}; it takes no answers.")
    for call_id, _ in checked:
        if call_id not in record.pending_calls:
            raise AnswerRejectedError(
                f"Invocation {invocation_id!r} has no pending call {call_id!r} "
                f"(pending: {record.pending_calls or 'none'}).")
        check_outside_answer(record, call_id)
    if len({call_id for call_id, _ in checked}) != len(checked):
        raise RequestError("answers", "answer each call once.")
    names = await _call_names(sessions, record)
    results = []
    for call_id, response in checked:
        name = names.get(call_id)
        if name is None:
            raise AnswerRejectedError(f"No call {call_id!r} in the session log.")
        if name == REQUEST_CONFIRMATION:
            check_confirmation(response)
        results.append(ToolResult(function_call_id=call_id, tool_name=name, response=response,
                                  source="client"))
    key = session_key(record)
    refused = await queue.push_answers(key, WorkItem(kind="resume", invocation_id=invocation_id),
                                       results)
    if refused is not None:
        raise AnswerRejectedError(f"Call {refused!r} was already answered.")
    return key


async def _call_names(sessions: BaseSessionService, record: InvocationRecord) -> dict[str, str]:
    """The tool name of every call of the record's session, by call id."""
    session = await sessions.get_session(
        app_name=record.app_name, user_id=record.user_id, session_id=record.session_id)
    return {call.id: call.name or "" for event in (session.events if session else [])
            for call in event.get_function_calls() if call.id}


def _inside(registry: AppRegistry, app_name: str, entry: CallEntry) -> bool:
    if entry.name in _REQUESTS:
        return False
    if entry.name == RUN_BRANCH:
        return True
    return _long_running(registry, app_name, entry.event.author, entry.name) is False


def _long_running(registry: AppRegistry, app_name: str, author: str, name: str) -> bool | None:
    """Whether the tool ``name`` of agent ``author`` is long-running (None: cannot tell).

    Only tools the agent declares itself are looked at: a toolset's tools are listed per
    invocation, so a call of one is left to the outside, as before.
    """
    try:
        agent = registry.get(app_name).root_agent.find_agent(author)
    except LookupError:
        return None
    # The agents and tools: loaded with the app already (a client taking answers has none).
    from orchestrator.agents.llm_agent import LlmAgent
    from orchestrator.tools.base_tool import BaseTool
    from orchestrator.tools.base_toolset import BaseToolset
    from orchestrator.tools.function_tool import callable_name

    if not isinstance(agent, LlmAgent):
        return None
    for entry in agent.tools:
        if isinstance(entry, BaseToolset):
            continue
        if isinstance(entry, BaseTool):
            if entry.name == name:
                return entry.is_long_running
        elif callable_name(entry) == name:
            return False  # a plain function: a FunctionTool, never long-running
    return None


async def queue_cancel(store: InvocationStore, queue: SessionQueue, record: InvocationRecord) -> SessionKey:
    """Queue the cancel of ``record``'s invocation and set its cancel flag.

    The item first: on its own (a crash before the flag) it still ends the invocation
    cancelled; a flag without its item stopped nothing that was paused, for ever. The flag
    is what a start not taken yet, each append and each worker read: a cancel asked while
    the invocation is queued runs nothing of it.
    """
    key = session_key(record)
    await queue.push(key, WorkItem(kind="cancel", invocation_id=record.invocation_id))
    failpoints.hit("cancel.queued")
    await store.request_cancel(record.app_name, record.invocation_id)
    return key
