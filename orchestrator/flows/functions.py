"""Executing the function calls of one model event and merging the answers into one event."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator import failpoints, observe, platform
from orchestrator.agents.context import ToolContext
from orchestrator.distributed.intake import not_json_answer
from orchestrator.distributed.transport import commit_dispatch, tool_queue
from orchestrator.events.answers import final_answer_ids
from orchestrator.events.event import Event
from orchestrator.events.event_actions import EventActions
from orchestrator.flows import tool_callbacks
from orchestrator.flows.contents import REQUEST_CONFIRMATION
from orchestrator.flows.remote_calls import dispatch_remote_call
from orchestrator.flows.tool_deadlines import CallDeadline
from orchestrator.tools.base_tool import BaseTool
from orchestrator.tools.function_tool import (
    CONFIRMATION_REJECTED_ERROR,
    CONFIRMATION_REQUIRED_ERROR,
    confirmation_hint,
)
from orchestrator.tools.tool_confirmation import ToolConfirmation

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.llm_agent import LlmAgent


def populate_client_function_call_ids(event: Event) -> None:
    """Give every function call without an id a client-side ``adk-<uuid4>`` id."""
    for call in event.get_function_calls():
        if not call.id:
            call.id = platform.new_function_call_id()


def long_running_ids(ctx: InvocationContext, event: Event, tools: dict[str, BaseTool]) -> set[str]:
    """Ids of the calls in ``event`` that pause: long-running tools, and remote ones."""
    ids = set()
    for call in event.get_function_calls():
        tool = tools.get(call.name or "")
        if call.id and tool is not None and (
            tool.is_long_running or tool_queue(ctx.transport, tool)
        ):
            ids.add(call.id)
    return ids


def tool_not_found_response(name: str, tools: dict[str, BaseTool]) -> dict[str, Any]:
    """The error the model sees when it calls a tool that does not exist."""
    available = ", ".join(tools) or "none"
    return {
        "error": (
            f"Invoking `{name}()` failed as no tool with that name is available. The tools you "
            f"can call are: {available}. You could retry, but it is IMPORTANT that you only "
            "call a tool from that list."
        )
    }


class _CallOutcome:
    """What one call produced: an answer part (or none), its actions, and maybe a text copy."""

    __slots__ = ("part", "actions", "shown")

    def __init__(
        self, part: types.Part | None, actions: EventActions, shown: types.Part | None = None
    ) -> None:
        self.part = part
        self.actions = actions
        self.shown = shown
        """The result as text, for UIs that show no function responses (see :func:`_answer`)."""


async def handle_function_calls(
    ctx: InvocationContext,
    call_event: Event,
    tools: dict[str, BaseTool],
    *,
    confirmations: dict[str, ToolConfirmation] | None = None,
    only_ids: set[str] | None = None,
    dispatched: list[str] | None = None,
    in_process: frozenset[str] = frozenset(),
) -> AsyncGenerator[Event, None]:
    """Run the calls of ``call_event`` concurrently; yield the merged answer event, if any.

    With a transport, calls of remote tools are submitted as jobs instead (their ids are
    appended to ``dispatched``); their answers arrive later. Calls in ``in_process`` run
    here whatever their tool.

    If a tool raises and no ``on_tool_error_callback`` recovers, the answers already finished
    are yielded first, then the exception propagates (remaining calls are cancelled).
    """
    agent: LlmAgent = ctx.agent  # type: ignore[assignment]
    calls = [
        c for c in call_event.get_function_calls()
        if only_ids is None or c.id in only_ids
    ]
    if not calls:
        return
    confirmations = confirmations or {}
    # Calls whose jobs went out with the commit of call_event are not submitted again.
    sent = commit_dispatch(call_event)
    published = sent.published if sent is not None else set()
    coros = [
        _execute_call(ctx, agent, call, tools, confirmations.get(call.id or ""), dispatched,
                      published, here=call.id in in_process)
        for call in calls
    ]
    outcomes: list[_CallOutcome | None]
    error: BaseException | None = None
    if len(coros) == 1:
        outcomes = [await coros[0]]
    else:
        tasks = [asyncio.ensure_future(c) for c in coros]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        outcomes = []
        for task in tasks:
            if task in done and task.exception() is None:
                outcomes.append(task.result())
            else:
                if task in done and error is None:
                    error = task.exception()
                outcomes.append(None)
    merged = merge_outcomes(ctx, agent.name, [o for o in outcomes if o is not None])
    if merged is not None:
        yield merged
    if error is not None:
        raise error


def merge_outcomes(
    ctx: InvocationContext, author: str, outcomes: list[_CallOutcome]
) -> Event | None:
    """Merge per-call answers into one event: parts in call order, actions deep-merged."""
    parts = [part for o in outcomes for part in (o.part, o.shown) if part is not None]
    if not parts:
        return None
    actions = outcomes[0].actions
    if len(outcomes) > 1:
        merged: dict[str, Any] = {}
        for outcome in outcomes:
            deep_merge(merged, outcome.actions.model_dump(exclude_none=True))
        actions = EventActions.model_validate(merged)
    return Event(
        invocation_id=ctx.invocation_id,
        author=author,
        branch=ctx.branch,
        content=types.Content(role="user", parts=parts),
        actions=actions,
    )


def deep_merge(target: dict[str, Any], source: dict[str, Any]) -> None:
    """Merge ``source`` into ``target``: nested dicts key by key, other values replaced."""
    for key, value in source.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            deep_merge(target[key], value)
        else:
            target[key] = value


async def _execute_call(
    ctx: InvocationContext,
    agent: LlmAgent,
    call: types.FunctionCall,
    tools: dict[str, BaseTool],
    confirmation: ToolConfirmation | None,
    dispatched: list[str] | None = None,
    published: set[str] | frozenset[str] = frozenset(),
    *,
    here: bool = False,
) -> _CallOutcome:
    name = call.name or ""
    args = copy.deepcopy(call.args or {})
    tool = tools.get(name)
    deadline = CallDeadline.of(ctx, tool)  # only in a branch's job on a worker
    tool_context = deadline.tool_context(call.id, confirmation) if deadline else ToolContext(
        ctx, function_call_id=call.id, tool_confirmation=confirmation
    )
    if tool is None:
        return await _answer_unknown_tool(ctx, agent, call, name, args, tools, tool_context)
    queue = tool_queue(ctx.transport, tool) if not here else None
    # The tool's confirmation rule is asked once per call: a rule that answers differently
    # the second time must not let a held call run here.
    required: bool | None = None
    if queue and confirmation is None:
        required = bool(await tool.check_require_confirmation(args, tool_context))
    held = required if confirmation is None else not confirmation.confirmed
    if queue and not held:
        # A remote call runs its tool callbacks where the tool runs: on the worker.
        if call.id in published:
            failpoints.hit("dispatch.published_with_commit")
        else:
            await dispatch_remote_call(ctx, agent.name, call, queue, confirmation, tool)
        if dispatched is not None and call.id:
            dispatched.append(call.id)
        return _CallOutcome(None, tool_context.actions)

    async def invoke() -> Any:
        gate = await _confirmation_gate(tool, args, tool_context, confirmation, required)
        if gate is not None:
            return gate
        return await observe.timed_tool(
            tool.name, tool.run_async(args=args, tool_context=tool_context))

    answered_in = tool_context
    if deadline is None:
        result = await tool_callbacks.call_tool(ctx, agent, tool, args, tool_context, invoke)
    else:  # past its deadline, the timeout error is the answer, in a context of its own
        result, answered_in = await deadline.call(agent, args, invoke)
    if tool.is_long_running and not result:
        # The call stays open: its answer arrives later as a FunctionResponse.
        return _CallOutcome(None, answered_in.actions)
    if ctx.json_limits is not None:  # a branch's job: its answers must travel as JSON
        refusal = not_json_answer(name, {
            "response": result if isinstance(result, dict) else {"result": result},
            "state_delta": answered_in.actions.state_delta,
            "artifact_delta": answered_in.actions.artifact_delta}, ctx.json_limits)
        if refusal is not None:  # answered as a tool job would be, its writes dropped
            return _answer(call, name, {"error": refusal},
                           ToolContext(ctx, function_call_id=call.id), tool)
    return _answer(call, name, result, answered_in, tool)


async def _answer_unknown_tool(
    ctx: InvocationContext,
    agent: LlmAgent,
    call: types.FunctionCall,
    name: str,
    args: dict[str, Any],
    tools: dict[str, BaseTool],
    tool_context: ToolContext,
) -> _CallOutcome:
    """A call of a tool the agent does not have: the callbacks may answer it, else an error.

    Before-tool callbacks see a stand-in tool of that name; then the error callbacks see a
    ValueError; no after-tool callback runs (no tool ran).
    """
    stand_in = BaseTool(name=name or "<unnamed>", description="Tool not found")
    result = await tool_callbacks.before_tool(ctx, agent, stand_in, args, tool_context)
    if result is None:
        error = ValueError(
            f"Tool {name!r} not found. Available tools: {', '.join(tools) or 'none'}."
        )
        result = await tool_callbacks.on_tool_error(
            ctx, agent, stand_in, args, tool_context, error
        )
    if result is None:
        result = tool_not_found_response(name, tools)
    return _answer(call, name, result, tool_context)


async def _confirmation_gate(
    tool: BaseTool,
    args: dict[str, Any],
    tool_context: ToolContext,
    confirmation: ToolConfirmation | None,
    required: bool | None = None,
) -> dict[str, Any] | None:
    """Return an error answer if the call must wait for (or was refused) confirmation.

    Only a tool that requires confirmation is gated, as in google-adk: a tool that asked for
    one itself (``tool_context.request_confirmation``, maybe with a payload to fill in) runs
    again with the answer in ``tool_context.tool_confirmation``, rejected or not.
    ``required``: the tool's rule, if it was asked already for this call.
    """
    if required is None:
        required = bool(await tool.check_require_confirmation(args, tool_context))
    if not required:
        return None
    if confirmation is not None:
        return None if confirmation.confirmed else {"error": CONFIRMATION_REJECTED_ERROR}
    tool_context.request_confirmation(hint=confirmation_hint(tool.name))
    tool_context.actions.skip_summarization = True
    return {"error": CONFIRMATION_REQUIRED_ERROR}


def _answer(
    call: types.FunctionCall, name: str, result: Any, tool_context: ToolContext,
    tool: BaseTool | None = None,
) -> _CallOutcome:
    raw = result
    if not isinstance(result, dict):
        result = {"result": result}
    part = types.Part(
        function_response=types.FunctionResponse(id=call.id, name=name, response=result)
    )
    return _CallOutcome(part, tool_context.actions, _shown(tool, raw, result, tool_context))


def _shown(tool: BaseTool | None, raw: Any, result: dict[str, Any],
           tool_context: ToolContext) -> types.Part | None:
    """An agent tool's answer as text too when its turn skips the summary (as google-adk).

    The model writes nothing after such an answer, so a UI that shows no function responses
    would show nothing at all. Only for agent tools: other tools skip the summary precisely
    because their answer is not for display.
    """
    from orchestrator.tools.agent_tool import AgentTool  # only this path needs it

    if (not isinstance(tool, AgentTool) or not tool_context.actions.skip_summarization
            or "error" in result or raw is None or raw == "" or raw == {"result": None}):
        return None
    return types.Part(text=raw if isinstance(raw, str)
                      else json.dumps(raw, ensure_ascii=False, default=str))


def build_confirmation_request_event(
    ctx: InvocationContext, call_event: Event, answer_event: Event
) -> Event | None:
    """Turn requested confirmations into ``adk_request_confirmation`` calls (long-running)."""
    requested = answer_event.actions.requested_tool_confirmations
    if not requested:
        return None
    calls_by_id = {c.id: c for c in call_event.get_function_calls()}
    parts = []
    ids = set()
    for call_id, confirmation in requested.items():
        original = calls_by_id.get(call_id)
        if original is None:
            continue
        request_id = platform.new_function_call_id()
        ids.add(request_id)
        parts.append(types.Part(function_call=types.FunctionCall(
            id=request_id,
            name=REQUEST_CONFIRMATION,
            args={
                "originalFunctionCall": original.model_dump(mode="json", exclude_none=True),
                "toolConfirmation": confirmation.model_dump(
                    mode="json", by_alias=True, exclude_none=True
                ),
            },
        )))
    if not parts:
        return None
    return Event(
        invocation_id=ctx.invocation_id,
        author=ctx.agent.name,
        branch=ctx.branch,
        content=types.Content(role="model", parts=parts),
        long_running_tool_ids=ids,
    )


def with_confirmation_request(
    ctx: InvocationContext, call_event: Event, answer: Event
) -> list[Event]:
    """``answer``, and the ``adk_request_confirmation`` calls it asks for, in ADK's order.

    The request comes first when every answer is the gate's; after settled answers, last.
    """
    request = build_confirmation_request_event(ctx, call_event, answer)
    if request is None:
        return [answer]
    if not final_answer_ids(answer):
        return [request, answer]
    # Settled answers go first, and do not end the turn: the confirmation still waits.
    answer.actions.skip_summarization = None
    return [answer, request]
