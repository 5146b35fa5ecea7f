"""What a resumed LlmAgent step must do first, and how confirmation answers re-run tools.

On a resumable invocation an agent may find, in its own branch of the log, calls that were
never answered: a long-running call still open means PAUSE (stop quietly); an ordinary call
left unanswered by a crash means REPLAY (run only those calls again, then go on).

A confirmed call of a tool that runs on workers is sent to a worker with its confirmation,
and the step stops there: the model is called once its real answer is in, as after any
remote call. On recovery, a remote call of a tool with a confirmation rule that the log
shows neither gated nor confirmed (the orchestrator died between committing the call and
deciding on it) goes through the gate again (REPLAY) rather than out as it is.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.distributed.ledger import CallEntry, CallLedger
from orchestrator.distributed.transport import tool_queue
from orchestrator.events.event import Event
from orchestrator.flows import functions
from orchestrator.flows.contents import REQUEST_CONFIRMATION, belongs_to_branch
from orchestrator.tools.base_tool import BaseTool
from orchestrator.tools.tool_confirmation import ToolConfirmation

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext


class ResumeAction(enum.Enum):
    """What the step does before calling the model."""

    CONTINUE = "continue"
    PAUSE = "pause"
    REPLAY_CALLS = "replay_calls"
    DONE = "done"
    """Recovering: the agent's final answer is the last thing the log holds; stop."""


@dataclass
class ResumeDecision:
    """The action, and for REPLAY_CALLS the call event and the ids to run again."""

    action: ResumeAction
    call_event: Event | None = None
    call_ids: set[str] = field(default_factory=set)


def _branch_events(ctx: InvocationContext) -> list[Event]:
    return [
        e for e in ctx.session.events
        if e.invocation_id == ctx.invocation_id and belongs_to_branch(e.branch, ctx.branch)
    ]


def decide_step_resume(
    ctx: InvocationContext,
    agent_name: str,
    *,
    recovering: bool = False,
    tools: Callable[[], Mapping[str, BaseTool]] | None = None,
) -> ResumeDecision:
    """Inspect this invocation's branch events for unanswered calls of ``agent_name``.

    ``recovering``: the run continues an invocation whose orchestrator stopped mid-run; if
    the agent's final answer is the last event of the invocation, its turn was over (DONE),
    and calling the model again would answer twice. Open remote calls that may need a
    confirmation and have none are REPLAYed then (through the gate); ``tools`` gives the
    agent's tools by name, to tell which those are.
    """
    events = _branch_events(ctx)
    ledger = CallLedger.of(events, ctx.invocation_id)
    waiting = [entry for entry in ledger.open_calls() if entry.event.author == agent_name]
    if recovering and waiting and tools is not None:
        ungated = _ungated_remote_calls(ctx, ledger, waiting, tools())
        if ungated:
            event = ungated[0].event
            return ResumeDecision(ResumeAction.REPLAY_CALLS, event,
                                  {entry.id for entry in ungated if entry.event is event})
    if waiting:
        return ResumeDecision(ResumeAction.PAUSE)
    if recovering and _ends_with_final_answer(ctx, agent_name):
        return ResumeDecision(ResumeAction.DONE)
    answered = ledger.responded
    for event in reversed(events):
        calls = event.get_function_calls()
        if event.author != agent_name or not calls:
            continue
        open_ids = {c.id for c in calls if c.id} - answered - (event.long_running_tool_ids or set())
        if open_ids:
            return ResumeDecision(ResumeAction.REPLAY_CALLS, event, open_ids)
        break
    return ResumeDecision(ResumeAction.CONTINUE)


def _ungated_remote_calls(
    ctx: InvocationContext,
    ledger: CallLedger,
    waiting: list[CallEntry],
    tools: Mapping[str, BaseTool],
) -> list[CallEntry]:
    """Open remote calls that may need a confirmation and have no approved one.

    The log cannot tell whether the gate let such a call through (it leaves no event then)
    or never ran: only the gate may send it, never a recovery on its own.
    """
    transport = ctx.transport
    if transport is None:
        return []
    found = []
    for entry in waiting:
        tool = tools.get(entry.name)
        if tool is not None and not tool.never_requires_confirmation() and \
                tool_queue(transport, tool) and ledger.approved(entry.id) is None:
            found.append(entry)
    return found


def requests_owed(ctx: InvocationContext, agent_name: str) -> list[Event]:
    """Confirmation requests the gate decided on but that never reached the log.

    The gate's step commits two events, its provisional answer and the
    ``adk_request_confirmation`` call; an orchestrator that died between the two leaves the
    answer alone when it came first (beside answers of other calls). The request is built
    again from that answer, as the gate built it, so the log reads as if nothing had
    happened. (The other order leaves the request alone: the call is held all the same, see
    :meth:`CallLedger.gated`.)
    """
    events = _branch_events(ctx)
    ledger = CallLedger.of(events, ctx.invocation_id)
    unasked = ledger.unasked()
    owed = []
    for answer in events:
        asked = answer.actions.requested_tool_confirmations or {}
        if answer.author != agent_name or not unasked.intersection(asked):
            continue
        entry = ledger.calls.get(next(iter(unasked.intersection(asked))))
        if entry is None:
            continue
        request = functions.build_confirmation_request_event(ctx, entry.event, answer)
        if request is not None:
            owed.append(request)
    return owed


def _ends_with_final_answer(ctx: InvocationContext, agent_name: str) -> bool:
    """True if the last committed event this branch sees is ``agent_name``'s final answer.

    This branch's view: a parallel sibling's later events tell nothing of this one's turn.
    """
    last = next((e for e in reversed(ctx.session.events)
                 if e.invocation_id == ctx.invocation_id and not e.partial
                 and belongs_to_branch(e.branch, ctx.branch)), None)
    return (
        last is not None and last.author == agent_name and last.content is not None
        and not last.get_function_calls() and not last.get_function_responses()
        and last.is_final_response()
    )


async def answer_confirmations(
    ctx: InvocationContext,
    tools: Callable[[], dict[str, BaseTool]],
    dispatched: list[str] | None = None,
) -> AsyncGenerator[Event, None]:
    """If the latest user event answers ``adk_request_confirmation`` calls, run those tools.

    Approved calls run with ``tool_context.tool_confirmation`` set; rejected ones answer with
    an error. Each original call id gets its real answer: at once, or, for an approved call
    of a tool that runs on workers, when its job's result comes back (its id is appended to
    ``dispatched``; the step must stop). ``tools`` gives the agent's tools by name (asked
    only when there is something to run).

    When every answer of that event was acted on in an earlier turn (the same answer sent
    again, e.g. a client retry) and the event answers nothing else, the invocation ends
    (``ctx.end_invocation``): as in google-adk, that turn yields nothing and the model is not
    called again.
    """
    # The last event of this invocation's branch first: reading every event of a long
    # session on each model call is for the rare call that answers a confirmation. Agents'
    # events without content (their callbacks' state, checkpoints), committed as the answer
    # resumed them, are passed over.
    last = next((e for e in reversed(ctx.session.events)
                 if e.invocation_id == ctx.invocation_id
                 and belongs_to_branch(e.branch, ctx.branch)
                 and (e.content is not None or e.author == "user")), None)
    if last is None or last.author != "user":
        return
    answers = [r for r in last.get_function_responses() if r.name == REQUEST_CONFIRMATION]
    if not answers:
        return
    events = _branch_events(ctx)
    ledger = CallLedger.of(events, ctx.invocation_id)
    requests = {c.id: c for e in events for c in e.get_function_calls() if c.name == REQUEST_CONFIRMATION}
    originals: list[types.FunctionCall] = []
    confirmations: dict[str, ToolConfirmation] = {}
    in_process: set[str] = set()
    consumed = 0
    for answer in answers:
        request = requests.get(answer.id)
        if request is None:
            continue
        original = types.FunctionCall.model_validate((request.args or {}).get("originalFunctionCall", {}))
        if not original.id:
            continue
        if original.id in ledger.answered:
            consumed += 1  # answered for good already: a call has one real answer
            continue
        originals.append(original)
        confirmations[original.id] = ToolConfirmation.from_response_dict(answer.response or {})
        entry = ledger.calls.get(original.id)
        if entry is not None and not entry.long_running:
            # Its call does not wait for a later answer (made where no transport routes its
            # tool: a branch on a worker): it runs here, so its answer is the step's own.
            in_process.add(original.id)
    if not originals:
        if consumed == len(answers) and _only_confirmation_answers(last):
            # Every answer was acted on before this user event (its tool answered earlier,
            # as this is the last event of the branch): a resend. Nothing is owed, and a
            # model call would answer the turn a second time.
            ctx.end_invocation = True
        return
    synthetic = Event(
        invocation_id=ctx.invocation_id,
        author=ctx.agent.name,
        branch=ctx.branch,
        content=types.Content(role="model", parts=[types.Part(function_call=c) for c in originals]),
    )
    async for event in functions.handle_function_calls(
        ctx, synthetic, tools(), confirmations=confirmations, dispatched=dispatched,
        in_process=frozenset(in_process),
    ):
        yield event


def _only_confirmation_answers(event: Event) -> bool:
    """True if every function response in ``event`` answers a confirmation request.

    A resent confirmation beside another answer (a long-running tool's) still has work to
    do: the turn goes on for that one.
    """
    return all(r.name == REQUEST_CONFIRMATION for r in event.get_function_responses())
